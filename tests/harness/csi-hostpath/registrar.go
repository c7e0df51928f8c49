package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The node registrar: it asks the driver for its name, then serves the kubelet's plugin
// registration API (pluginregistration/v1: GetInfo, NotifyRegistrationStatus) on
// <plugin-registration-path>/<driver>-reg.sock, where the kubelet's plugin watcher finds it.
// GetInfo tells the kubelet where the driver's socket is on the node
// (--kubelet-registration-path). A registration the kubelet reports failed ends the process,
// so that the container restarts and registers again.

type registrar struct {
	registration.UnimplementedRegistrationServer
	driver   string
	endpoint string
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	log.Printf("GetInfo: driver %s at %s", r.driver, r.endpoint)
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              r.driver,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if !s.GetPluginRegistered() {
		log.Printf("the kubelet did not register driver %s: %s; exiting to register again", r.driver, s.GetError())
		os.Exit(1)
	}
	log.Printf("the kubelet registered driver %s", r.driver)
	return &registration.RegistrationStatusResponse{}, nil
}

// driverName asks the CSI driver at `address` for its name, retrying until it answers.
func driverName(address string) string {
	target := "unix://" + address
	if filepath.IsAbs(address) {
		target = "unix:" + address
	}
	for {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			info, callErr := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
			cancel()
			_ = conn.Close()
			if callErr == nil && info.GetName() != "" {
				return info.GetName()
			}
			err = callErr
		}
		log.Printf("waiting for the CSI driver at %s: %v", address, err)
		time.Sleep(time.Second)
	}
}

func runRegistrar(f flags) error {
	f.warnUnknown("csi-address", "kubelet-registration-path", "plugin-registration-path",
		"http-endpoint", "health-port")
	address := f.str("csi-address", "/run/csi/socket")
	endpoint := f.str("kubelet-registration-path", "")
	if endpoint == "" {
		return errors.New("--kubelet-registration-path is required")
	}
	dir := f.str("plugin-registration-path", "/registration")
	name := driverName(address)
	socket := filepath.Join(dir, name+"-reg.sock")
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	listener, _, err := listen(socket)
	if err != nil {
		return fmt.Errorf("registration socket %s: %w", socket, err)
	}
	server := grpc.NewServer()
	registration.RegisterRegistrationServer(server, &registrar{driver: name, endpoint: endpoint})
	if addr := f.str("http-endpoint", ""); addr != "" {
		go serveHealth(addr, func() error {
			_, err := os.Stat(socket)
			return err
		})
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		server.Stop()
		_ = os.Remove(socket)
		os.Exit(0)
	}()
	log.Printf("csi-node-driver-registrar %s: driver %s, kubelet registration socket %s, driver endpoint %s",
		version, name, socket, endpoint)
	return server.Serve(listener)
}

// serveHealth answers GET /healthz with 200 while `check` passes, else 500 and the error.
func serveHealth(addr string, check func() error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = fmt.Fprintln(w, err.Error())
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	log.Printf("serving /healthz on %s", addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}
