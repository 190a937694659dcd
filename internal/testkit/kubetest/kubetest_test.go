package kubetest

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const testNS = "portico-test"

func TestEnvServesGatewayAPI(t *testing.T) {
	env := Start(t)
	ctx := t.Context()
	kc, gc := Clients(t, env.Config)

	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	gwc := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller"},
	}
	if _, err := gc.GatewayV1().GatewayClasses().Create(ctx, gwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create GatewayClass: %v", err)
	}

	same := gatewayv1.NamespacesFromSame
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "edge"},
		Spec: gatewayv1.GatewaySpec{
			GatewayClassName: "portico",
			AllowedListeners: &gatewayv1.AllowedListeners{Namespaces: &gatewayv1.ListenerNamespaces{From: &same}},
			Listeners: []gatewayv1.Listener{{
				Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType,
			}},
		},
	}
	if _, err := gc.GatewayV1().Gateways(testNS).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Gateway: %v", err)
	}

	ls := &gatewayv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "tenant-a"},
		Spec: gatewayv1.ListenerSetSpec{
			ParentRef: gatewayv1.ParentGatewayReference{Name: "edge"},
			Listeners: []gatewayv1.ListenerEntry{{
				Name:     "a-https",
				Hostname: ptr.To(gatewayv1.Hostname("a.example.com")),
				Port:     443,
				Protocol: gatewayv1.HTTPSProtocolType,
				TLS: &gatewayv1.ListenerTLSConfig{
					CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "a-cert"}},
				},
			}},
		},
	}
	if _, err := gc.GatewayV1().ListenerSets(testNS).Create(ctx, ls, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ListenerSet: %v", err)
	}

	// Read back: the values we wrote, plus the defaults that only the
	// CRD schemas add, which shows the real schemas are served.
	gotGWC, err := gc.GatewayV1().GatewayClasses().Get(ctx, "portico", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get GatewayClass: %v", err)
	}
	if gotGWC.Spec.ControllerName != "portico.dev/gateway-controller" {
		t.Errorf("GatewayClass controllerName = %q", gotGWC.Spec.ControllerName)
	}
	gotGW, err := gc.GatewayV1().Gateways(testNS).Get(ctx, "edge", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Gateway: %v", err)
	}
	if n := len(gotGW.Spec.Listeners); n != 1 || gotGW.Spec.Listeners[0].Port != 80 {
		t.Errorf("Gateway listeners = %+v", gotGW.Spec.Listeners)
	}
	if r := gotGW.Spec.Listeners[0].AllowedRoutes; r == nil || r.Namespaces == nil || r.Namespaces.From == nil || *r.Namespaces.From != gatewayv1.NamespacesFromSame {
		t.Errorf("Gateway listener allowedRoutes not defaulted to from: Same: %+v", r)
	}
	if !hasCondition(gotGW.Status.Conditions, "Accepted", metav1.ConditionUnknown) {
		t.Errorf("Gateway status not defaulted to Accepted=Unknown: %+v", gotGW.Status.Conditions)
	}
	gotLS, err := gc.GatewayV1().ListenerSets(testNS).Get(ctx, "tenant-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ListenerSet: %v", err)
	}
	if k := gotLS.Spec.ParentRef.Kind; k == nil || *k != "Gateway" {
		t.Errorf("ListenerSet parentRef.kind not defaulted to Gateway: %v", k)
	}
	if l := gotLS.Spec.Listeners; len(l) != 1 || l[0].Hostname == nil || *l[0].Hostname != "a.example.com" || l[0].Port != 443 {
		t.Errorf("ListenerSet listeners = %+v", l)
	}

	// The status subresource is what Portico writes; it must not touch spec.
	gotLS.Status.Conditions = []metav1.Condition{{
		Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
		LastTransitionTime: metav1.Now(), ObservedGeneration: gotLS.Generation,
	}}
	gotLS.Spec.Listeners[0].Port = 8443
	updated, err := gc.GatewayV1().ListenerSets(testNS).UpdateStatus(ctx, gotLS, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update ListenerSet status: %v", err)
	}
	if !hasCondition(updated.Status.Conditions, "Accepted", metav1.ConditionTrue) || updated.Spec.Listeners[0].Port != 443 {
		t.Errorf("status update: conditions %+v, port %d", updated.Status.Conditions, updated.Spec.Listeners[0].Port)
	}

	// CRD validation, by schema and by CEL rule, runs in the server.
	http80 := gatewayv1.Listener{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}
	withHost := http80
	withHost.Hostname = ptr.To(gatewayv1.Hostname("Not_A_Host"))
	withTLS := http80
	withTLS.TLS = &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "a-cert"}}}
	invalid := map[string][]gatewayv1.Listener{
		"port-0":          {{Name: "http", Port: 0, Protocol: gatewayv1.HTTPProtocolType}},
		"port-70000":      {{Name: "http", Port: 70000, Protocol: gatewayv1.HTTPProtocolType}},
		"bad-hostname":    {withHost},
		"tls-on-http":     {withTLS},
		"duplicate-names": {http80, {Name: "http", Port: 8080, Protocol: gatewayv1.HTTPProtocolType}},
	}
	for name, listeners := range invalid {
		bad := &gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
			Spec:       gatewayv1.GatewaySpec{GatewayClassName: "portico", Listeners: listeners},
		}
		_, err := gc.GatewayV1().Gateways(testNS).Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: create Gateway: got %v, want Invalid", name, err)
		}
	}

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "a-cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: []byte("cert"), corev1.TLSPrivateKeyKey: []byte("key")},
	}
	if _, err := kc.CoreV1().Secrets(testNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret: %v", err)
	}
	gotSecret, err := kc.CoreV1().Secrets(testNS).Get(ctx, "a-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret: %v", err)
	}
	if string(gotSecret.Data[corev1.TLSCertKey]) != "cert" || gotSecret.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret read back as %v %q", gotSecret.Type, gotSecret.Data)
	}
	// A TLS Secret without its key is rejected by the built-in validation.
	secret.Name, secret.Data = "no-key", map[string][]byte{corev1.TLSCertKey: []byte("cert")}
	if _, err := kc.CoreV1().Secrets(testNS).Create(ctx, secret, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create TLS Secret without key: got %v, want Invalid", err)
	}
}

func hasCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == status
		}
	}
	return false
}

// RBAC is enforced: a ServiceAccount may read Gateways only once a Role
// allows it, both when impersonated and with a token of its own.
func TestEnvEnforcesRBAC(t *testing.T) {
	env := Start(t)
	ctx := t.Context()
	kc, _ := Clients(t, env.Config)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	tokenCfg, err := env.ServiceAccountConfig(ctx, testNS, "portico")
	if err != nil {
		t.Fatal(err)
	}
	identities := map[string]*rest.Config{
		"impersonated": env.ImpersonatingConfig("system:serviceaccount:" + testNS + ":portico"),
		"token":        tokenCfg,
	}
	listGateways := func(cfg *rest.Config) error {
		_, gc := Clients(t, cfg)
		_, err := gc.GatewayV1().Gateways(testNS).List(ctx, metav1.ListOptions{})
		return err
	}
	for name, cfg := range identities {
		if err := listGateways(cfg); !apierrors.IsForbidden(err) {
			t.Errorf("%s: list Gateways before any Role: got %v, want Forbidden", name, err)
		}
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "gateway-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{gatewayv1.GroupName}, Resources: []string{"gateways"}, Verbs: []string{"get", "list", "watch"},
		}},
	}
	if _, err := kc.RbacV1().Roles(testNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role: %v", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "portico-reads-gateways"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gateway-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: testNS, Name: "portico"}},
	}
	if _, err := kc.RbacV1().RoleBindings(testNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding: %v", err)
	}
	for name, cfg := range identities {
		// The authorizer reads RBAC objects from a cache that lags writes.
		var last error
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			last = listGateways(cfg)
			return last == nil, nil
		})
		if err != nil {
			t.Errorf("%s: list Gateways with a Role: %v", name, last)
		}
		_, gc := Clients(t, cfg)
		_, err = gc.GatewayV1().Gateways("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: list Gateways in another namespace: got %v, want Forbidden", name, err)
		}
	}
}

// The controller manager makes Deployments, Namespaces and ServiceAccounts
// behave as in a cluster.
func TestControllerManager(t *testing.T) {
	env := Start(t)
	env.StartControllerManagerT(t)
	ctx := t.Context()
	kc, _ := Clients(t, env.Config)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	poll := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().ServiceAccounts(testNS).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})

	labels := map[string]string{"app": "backend"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "backend"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "backend"}}},
			},
		},
	}
	if _, err := kc.AppsV1().Deployments(testNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	// Nothing schedules or runs pods, but the ReplicaSet and its pods exist.
	poll("pods of the Deployment", func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=backend"})
		return err == nil && len(pods.Items) == 2, nil
	})

	if err := kc.CoreV1().Namespaces().Delete(ctx, testNS, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	poll("namespace deletion", func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().Namespaces().Get(ctx, testNS, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
