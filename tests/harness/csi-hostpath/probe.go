package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The liveness probe: GET /healthz on --health-port calls the driver's Probe and answers 200
// when it is ready, 500 with the reason when not (the driver container's livenessProbe points
// at this port).
func runProbe(f flags) error {
	f.warnUnknown("csi-address", "health-port", "probe-timeout", "http-endpoint")
	address := f.str("csi-address", "/run/csi/socket")
	timeout, err := time.ParseDuration(f.str("probe-timeout", "1s"))
	if err != nil {
		return fmt.Errorf("--probe-timeout: %w", err)
	}
	addr := f.str("http-endpoint", "")
	if addr == "" {
		addr = ":" + f.str("health-port", "9808")
	}
	target := "unix:" + address
	if !filepath.IsAbs(address) {
		target = "unix://" + address
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	identity := csi.NewIdentityClient(conn)
	serveHealth(addr, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		resp, err := identity.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return err
		}
		if ready := resp.GetReady(); ready != nil && !ready.GetValue() {
			return errors.New("driver says it is not ready")
		}
		return nil
	})
	return nil
}
