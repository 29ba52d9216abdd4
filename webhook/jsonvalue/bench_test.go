package jsonvalue

import "testing"

// benchDoc is a defaulted Training PodCliqueSet as the apiserver sends it.
const benchDoc = `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"labels":{"team":"research"},"name":"llm-pretrain","namespace":"load"},` +
	`"spec":{"replicas":1,"template":{"cliques":[{"name":"leader","spec":{"minAvailable":1,"podSpec":{"containers":[{"args":["--role","leader"],` +
	`"image":"nvcr.io/nvidia/pytorch:25.01-py3","name":"leader","resources":{"limits":{"nvidia.com/gpu":"8"}}}],"restartPolicy":"Never"},` +
	`"replicas":1,"roleName":"leader"}},{"name":"worker","spec":{"minAvailable":4,"podSpec":{"containers":[{"args":["--role","worker"],` +
	`"image":"nvcr.io/nvidia/pytorch:25.01-py3","name":"worker","resources":{"limits":{"nvidia.com/gpu":"8"}}}],"restartPolicy":"Never"},` +
	`"replicas":4,"roleName":"worker","startsAfter":["leader"]}}],"headlessServiceConfig":{"publishNotReadyAddresses":true},"terminationDelay":"0s"},` +
	`"trainingSpec":{"maxRestarts":0,"maxRuntime":"24h"},"workloadType":"Training"}}`

// BenchmarkDecodeIntoArena decodes a typical object as the server does:
// into a warm arena, reset after each document.
func BenchmarkDecodeIntoArena(b *testing.B) {
	var a Arena
	doc := []byte(benchDoc)
	b.SetBytes(int64(len(benchDoc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewScanner(doc, &a).Value(); err != nil {
			b.Fatal(err)
		}
		a.Reset()
	}
}
