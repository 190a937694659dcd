package source

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
)

func TestEventHandlersSeparateStatusFromSpec(t *testing.T) {
	gw := func(rv string, gen int64, labels map[string]string) *gwv1.Gateway {
		return &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "g", ResourceVersion: rv, Generation: gen, Labels: labels}}
	}
	cases := []struct {
		name             string
		old, new         any
		spec             bool // through specHandler, else anyHandler
		changed, onlySts int
	}{
		{"Gateway status write", gw("1", 3, nil), gw("2", 3, nil), true, 0, 1},
		{"Gateway spec change", gw("1", 3, nil), gw("2", 4, nil), true, 1, 0},
		{"Gateway label change", gw("1", 3, nil), gw("2", 3, map[string]string{"a": "b"}), true, 1, 0},
		{"Gateway resync", gw("1", 3, nil), gw("1", 3, nil), true, 0, 0},
		{"Secret update", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}}, false, 1, 0},
		{"Secret resync", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, false, 0, 0},
	}
	for _, tc := range cases {
		var changed, onlyStatus int
		h := Handlers{Changed: func() { changed++ }, StatusChanged: func(metav1.Object) { onlyStatus++ }}
		handler := anyHandler(h)
		if tc.spec {
			handler = specHandler(h)
		}
		handler.OnUpdate(tc.old, tc.new)
		if changed != tc.changed || onlyStatus != tc.onlySts {
			t.Errorf("%s: %d rebuilds and %d status rechecks, want %d and %d", tc.name, changed, onlyStatus, tc.changed, tc.onlySts)
		}
	}
}

// TestKeepCACertificate: the ConfigMap cache holds ca.crt and nothing else.
func TestKeepCACertificate(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{"big": "annotation"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data:       map[string]string{wellknown.CACertificateKey: "PEM", "config.yaml": "large"},
		BinaryData: map[string][]byte{"blob": []byte("large")},
	}
	out, err := keepCACertificate(cm)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.ConfigMap)
	if len(got.Data) != 1 || got.Data[wellknown.CACertificateKey] != "PEM" || got.BinaryData != nil || got.Annotations != nil || got.ManagedFields != nil {
		t.Errorf("kept %+v", got)
	}
	plain, _ := keepCACertificate(&corev1.ConfigMap{Data: map[string]string{"a": "b"}})
	if d := plain.(*corev1.ConfigMap).Data; d != nil {
		t.Errorf("a ConfigMap without ca.crt kept %v", d)
	}
}
