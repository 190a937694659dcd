package provisioner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"portico.dev/portico/internal/controlplane/provision"
)

// TestTokenReviewerSharesReviews: a burst of questions about one token
// (a data plane's acknowledgements) costs one TokenReview, whose answer is
// the ServiceAccount; a token for another audience is refused.
func TestTokenReviewerSharesReviews(t *testing.T) {
	kc := fake.NewClientset()
	var reviews atomic.Int64
	kc.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:apps:web-dedicated"}}
		if tr.Spec.Token == "good" {
			tr.Status.Audiences = []string{provision.TokenAudience}
		}
		return true, tr, nil
	})
	review := TokenReviewer(kc)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ns, sa, err := review(context.Background(), "good")
			if err != nil || ns != "apps" || sa != "web-dedicated" {
				t.Errorf("review = %s/%s, %v", ns, sa, err)
			}
		})
	}
	wg.Wait()
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews for one token", n)
	}
	if _, _, err := review(context.Background(), "other-audience"); err == nil {
		t.Error("a token for another audience was accepted")
	}
}

// TestTokenReviewerBoundsReviewFloods: anyone who reaches the hub's port
// can make it review tokens, and reviews go through the controller's own
// API client, whose rate limit its leader election and status writes
// share. A client sending a flood of distinct forged tokens gets a bounded
// number of reviews; those beyond are refused without one, and not
// remembered, so that a real token is reviewed once the flood ebbs.
func TestTokenReviewerBoundsReviewFloods(t *testing.T) {
	kc := fake.NewClientset()
	var reviews atomic.Int64
	kc.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		return true, tr, nil
	})
	review := TokenReviewer(kc)
	const flood = 2000
	for i := range flood {
		if _, _, err := review(context.Background(), fmt.Sprintf("forged-%d", i)); err == nil {
			t.Fatal("a forged token passed")
		}
	}
	if n := reviews.Load(); n > reviewBurst+reviewQPS*5 {
		t.Errorf("%d forged tokens cost %d TokenReviews, want at most about %d", flood, n, reviewBurst)
	}
}
