package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/retryq/retryq"
)

// The dead-letter queue keeps each dead task with its payload, reason and
// last error. ListDead pages through it, newest first: follow the cursor
// until it is "". Retry runs one dead task again; Purge deletes the ones a
// filter selects.
func ExampleClient_ListDead() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)
	client, closeAll := openExampleClient(ctx, dir)
	defer closeAll()

	mux := retryq.NewMux()
	mux.HandleFunc("image.resize", func(ctx context.Context, t *retryq.Task) error {
		return retryq.Permanent(retryq.WithCode("unsupported_format", errors.New("not an image")))
	})
	stop := runExampleWorker(client, retryq.WorkerConfig{Handler: mux})
	var ids []string
	for _, name := range []string{"a.heic", "b.heic", "c.heic"} {
		res, _ := client.Enqueue(ctx, "image.resize", map[string]string{"file": name})
		untilState(client, res.Task.ID, retryq.StateDead)
		ids = append(ids, res.Task.ID)
	}
	stop() // so that the task retried below stays pending

	f := retryq.DeadFilter{Type: "image.resize", Reason: retryq.DeadNonRetryable, Limit: 2}
	for page := 1; ; page++ {
		dead, next, err := client.ListDead(ctx, f)
		if err != nil {
			panic(err)
		}
		for _, t := range dead {
			fmt.Println("page", page, string(t.Payload), t.LastError.Code)
		}
		if next == "" {
			break
		}
		f.Cursor = next
	}

	retried, _ := client.Retry(ctx, ids[0])
	fmt.Println("retried:", retried.State, retried.Attempt)
	n, _ := client.Purge(ctx, retryq.DeadFilter{Type: "image.resize", Before: time.Now().Add(time.Minute)})
	fmt.Println("purged:", n)
	_, err := client.Get(ctx, ids[2])
	fmt.Println(errors.Is(err, retryq.ErrNotFound))
	// Output:
	// page 1 {"file":"c.heic"} unsupported_format
	// page 1 {"file":"b.heic"} unsupported_format
	// page 2 {"file":"a.heic"} unsupported_format
	// retried: pending 0
	// purged: 2
	// true
}
