module github.com/retryq/retryq

go 1.26
