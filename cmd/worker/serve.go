package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/objstore"
	"github.com/tidemark-io/tidemark/pkg/worker"
)

type serveFlags struct {
	dataURL    string
	httpAddr   string
	instanceID string
	logLevel   string
	shutdown   time.Duration
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the worker's HTTP API until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dataURL, "data-url", "file://./data", "object storage URL of every store (file://, mem://, s3://, azblob://, gs://; ?prefix= optional)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address the HTTP API and /metrics listen on")
	fs.StringVar(&f.instanceID, "instance-id", "", "this worker's stable id, and its shard name in every store (default: the hostname)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", worker.DefaultShutdownTimeout, "how long shutdown waits for in-flight requests")
	cli.BindEnv(fs, "data-url", "DATA_URL")
	cli.BindEnv(fs, "http-addr", "HTTP_ADDR")
	cli.BindEnv(fs, "instance-id", "INSTANCE_ID")
	cli.BindEnv(fs, "log-level", "LOG_LEVEL")
	cli.BindEnv(fs, "shutdown-timeout", "SHUTDOWN_TIMEOUT")
	return cmd
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	ctx := cmd.Context()
	log, err := cli.NewLogger(cmd.ErrOrStderr(), f.logLevel)
	if err != nil {
		return err
	}
	instanceID := f.instanceID
	if instanceID == "" {
		if instanceID, err = os.Hostname(); err != nil {
			return fmt.Errorf("instance id: none given (--instance-id, INSTANCE_ID) and no hostname: %w", err)
		}
	}

	srv, err := worker.NewServer(worker.Config{
		InstanceID:      instanceID,
		Logger:          log,
		ShutdownTimeout: f.shutdown,
	})
	if err != nil {
		return err
	}
	bucket, err := objstore.Open(ctx, f.dataURL)
	if err != nil {
		return fmt.Errorf("data url (--data-url, DATA_URL): %w", err)
	}
	defer bucket.Close()

	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fmt.Errorf("http addr (--http-addr, HTTP_ADDR): %w", err)
	}
	log.Info("worker starting", "instance_id", instanceID, "data_url", bucket.String(), "version", cli.Version())
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	log.Info("worker stopped", "instance_id", instanceID)
	return nil
}
