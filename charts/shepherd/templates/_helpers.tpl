{{/*
Object names. Every name the chart renders derives from shepherd.fullname:
fullnameOverride, else nameOverride, else the chart's name. Unlike a
helm-create chart the release name is not part of it: shepherd is installed
once per cluster (its webhook configurations and ClusterRoles are
cluster-scoped), a release of any name renders the names deploy/ uses, so the
chart can take over a Kustomize install, and `shepherd serve`'s defaults
(the Service, the certificate Secret, the webhook configurations, the Lease)
are these names. With an override the Deployment passes them as flags
(shepherd.nameArgs).

Not derived, on purpose: the native mode's ValidatingAdmissionPolicies and
MutatingAdmissionPolicies (shepherd-<rule>, as `shepherd export` writes them:
serve's audit sink maps those names back to rule IDs) and the CRDs (named by
their group).
*/}}
{{- define "shepherd.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "shepherd.fullname" -}}
{{- .Values.fullnameOverride | default (include "shepherd.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* The Service the apiserver calls the webhooks through (--webhook-service). */}}
{{- define "shepherd.serviceName" -}}
{{ include "shepherd.fullname" . }}-webhook
{{- end }}

{{/* The self-signed mode's certificate Secret (--cert-secret). */}}
{{- define "shepherd.certSecretName" -}}
{{ include "shepherd.fullname" . }}-webhook-certs
{{- end }}

{{/* The ValidatingWebhookConfiguration (--validating-webhook-configuration). */}}
{{- define "shepherd.validatingWebhookName" -}}
{{ include "shepherd.fullname" . }}
{{- end }}

{{/*
The MutatingWebhookConfiguration (--mutating-webhook-configuration). It
starts with "defaults." so that it sorts before the upstream defaulting
webhooks of the same kinds, which the apiserver calls after it
(deploy/webhook/webhooks.yaml says why); the default keeps the name
defaults.shepherd.dev it has always had.
*/}}
{{- define "shepherd.mutatingWebhookName" -}}
{{- $full := include "shepherd.fullname" . -}}
{{- if eq $full "shepherd" -}}
defaults.shepherd.dev
{{- else -}}
defaults.{{ $full }}.shepherd.dev
{{- end -}}
{{- end }}

{{/* The leader-election Lease (--leader-election-id). */}}
{{- define "shepherd.leaderElectionID" -}}
{{ include "shepherd.fullname" . }}.shepherd.dev
{{- end }}

{{/*
The serve flags naming the objects above. With the default names serve's
defaults are these names already, so nothing is added and the Deployment
stays deploy/default's.
*/}}
{{- define "shepherd.nameArgs" -}}
{{- if ne (include "shepherd.fullname" .) "shepherd" -}}
- --webhook-service={{ include "shepherd.serviceName" . }}
- --cert-secret={{ include "shepherd.certSecretName" . }}
- --validating-webhook-configuration={{ include "shepherd.validatingWebhookName" . }}
- --mutating-webhook-configuration={{ include "shepherd.mutatingWebhookName" . }}
- --leader-election-id={{ include "shepherd.leaderElectionID" . }}
{{- end -}}
{{- end }}

{{/* Labels of every object. */}}
{{- define "shepherd.labels" -}}
app.kubernetes.io/name: {{ include "shepherd.name" . }}
app.kubernetes.io/part-of: shepherd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "shepherd.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The pods' selector labels. The same as deploy/'s (and without the release
name; nameOverride replaces the name), because a Deployment's selector is immutable: a cluster installed with
Kustomize can be taken over by the chart.
*/}}
{{- define "shepherd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shepherd.name" . }}
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
dict of path, failurePolicy, timeoutSeconds, excluded, objectSelector,
namespace and service.
*/}}
{{- define "shepherd.nativeWebhook" -}}
admissionReviewVersions: ["v1"]
clientConfig:
  service:
    name: {{ .service }}
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

{{/*
The webhook that validates WorkloadPolicies at apply (deploy/webhook/
webhooks.yaml): in both admission modes, in the validating configuration.
A policy labelled shepherd.dev/apply-unchecked=true is let through: one
applied ahead of its kind's CRD.
*/}}
{{- define "shepherd.policyWebhook" -}}
- name: workloadpolicies.validate.shepherd.dev
  admissionReviewVersions: ["v1"]
  clientConfig:
    service:
      name: {{ include "shepherd.serviceName" . }}
      namespace: {{ .Release.Namespace }}
      path: /validate-workloadpolicy
      port: 443
  failurePolicy: {{ .Values.webhook.failurePolicy }}
  matchPolicy: Equivalent
  sideEffects: None
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
  # Cluster-scoped: no namespaceSelector.
  objectSelector:
    matchExpressions:
    - key: shepherd.dev/apply-unchecked
      operator: NotIn
      values: ["true"]
  rules:
  - apiGroups: ["shepherd.dev"]
    apiVersions: ["v1alpha1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["workloadpolicies"]
{{- end }}
