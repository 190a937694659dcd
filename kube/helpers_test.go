package kube

import (
	"testing"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/translate"
)

// translateFile translates the objects of a YAML file or directory.
func translateFile(t testing.TB, path string) (*config.Config, *status.Computed) {
	t.Helper()
	res, err := filesource.New(path, zap.NewNop()).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := translate.Translate(translate.Settings{}, res, translate.Memory{})
	return out.Config, out.Statuses
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
