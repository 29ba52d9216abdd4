{{/*
Object names are fixed, as in deploy/: shepherd is installed once per cluster
(its webhook configurations and ClusterRoles are cluster-scoped), and
`shepherd serve` finds the Service, the certificate Secret and the webhook
configurations by these default names, so no flag has to repeat them.
*/}}

{{/* Labels of every object. */}}
{{- define "shepherd.labels" -}}
app.kubernetes.io/name: shepherd
app.kubernetes.io/part-of: shepherd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "shepherd.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The pods' selector labels. The same as deploy/'s (and without the release
name), because a Deployment's selector is immutable: a cluster installed with
Kustomize can be taken over by the chart.
*/}}
{{- define "shepherd.selectorLabels" -}}
app.kubernetes.io/name: shepherd
app.kubernetes.io/component: webhook
{{- end }}

{{- define "shepherd.tag" -}}
{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The namespaces the webhooks never see: the configured ones and always the
release namespace, without duplicates, in that order.
*/}}
{{- define "shepherd.excludedNamespaces" -}}
{{- $ns := list -}}
{{- range .Values.webhook.excludedNamespaces -}}
{{- $ns = append $ns . -}}
{{- end -}}
{{- $ns = append $ns .Release.Namespace | uniq -}}
{{ toJson $ns }}
{{- end }}

{{/*
GOMEMLIMIT: goMemLimitPercent of the memory limit, in KiB (a unit Go's
runtime reads). The limit is a whole number with a binary (Ki, Mi, Gi, Ti)
or decimal (k, M, G, T) suffix, or none (bytes), so the arithmetic stays in
integers; another form fails with a message that says so.
*/}}
{{- define "shepherd.goMemLimit" -}}
{{- $limit := .Values.resources.limits.memory | toString -}}
{{- $n := regexFind "^[0-9]+" $limit | atoi -}}
{{- $unit := trimPrefix (regexFind "^[0-9]+" $limit) $limit -}}
{{- $bytes := get (dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000) $unit -}}
{{- if or (not $bytes) (eq $n 0) -}}
{{- fail (printf "resources.limits.memory %q: use a whole number of bytes, or with one of the suffixes Ki, Mi, Gi, Ti, k, M, G, T (e.g. 512Mi or 1G): GOMEMLIMIT is computed from it" $limit) -}}
{{- end -}}
{{- printf "%dKiB" (div (div (mul $n $bytes .Values.goMemLimitPercent) 100) 1024) -}}
{{- end }}

{{/*
The fields every native-mode webhook shares (webhooks-native.yaml), from a
dict of path, failurePolicy, timeoutSeconds, excluded, objectSelector and
namespace.
*/}}
{{- define "shepherd.nativeWebhook" -}}
admissionReviewVersions: ["v1"]
clientConfig:
  service:
    name: shepherd-webhook
    namespace: {{ .namespace }}
    path: {{ .path }}
    port: 443
failurePolicy: {{ .failurePolicy }}
matchPolicy: Equivalent
# shepherd writes PolicyViolation Events for real requests only.
sideEffects: NoneOnDryRun
timeoutSeconds: {{ .timeoutSeconds }}
# Never kube-system nor shepherd's own namespace.
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ toJson .excluded }}
{{- with .objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
