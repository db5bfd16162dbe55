package retryq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/retry"
)

func TestMuxMiddlewareAndRouting(t *testing.T) {
	mux := retryq.NewMux()
	var trail []string
	mw := func(name string) retryq.Middleware {
		return func(next retryq.Handler) retryq.Handler {
			return retryq.HandlerFunc(func(ctx context.Context, task *retryq.Task) error {
				trail = append(trail, name+">")
				err := next.ProcessTask(ctx, task)
				trail = append(trail, "<"+name)
				return err
			})
		}
	}
	mux.Use(mw("outer"), mw("inner"))
	mux.HandleFunc("b", func(ctx context.Context, task *retryq.Task) error { trail = append(trail, "b"); return nil })
	mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error { return errors.New("boom") })
	if got := strings.Join(mux.Types(), ","); got != "a,b" {
		t.Fatalf("Types() = %s", got)
	}
	if err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "b"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(trail, " "); got != "outer> inner> b <inner <outer" {
		t.Fatalf("middleware order: %s", got)
	}
	if err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "a"}); err == nil || err.Error() != "boom" {
		t.Fatalf("handler error not passed through: %v", err)
	}
	err := mux.ProcessTask(context.Background(), &retryq.Task{Type: "nope"})
	class, code, _ := retry.Classify(err)
	if class != retry.ClassPermanent || code != "no_handler" {
		t.Fatalf("unknown type: class %s code %q (%v)", class, code, err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a type twice did not panic")
		}
	}()
	mux.HandleFunc("a", func(ctx context.Context, task *retryq.Task) error { return nil })
}
