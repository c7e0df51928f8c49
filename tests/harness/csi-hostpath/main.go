// Command csi-hostpath is the test harness's stand-in for three kubernetes-csi programs whose Go
// modules the module proxy does not serve here: the hostpath CSI driver (hostpathplugin), the
// node-driver-registrar and the livenessprobe. One binary; it acts as the one it is named as
// (argv[0]'s base name, as the images install it), or as the one its first argument names:
//
//	hostpathplugin --drivername=hostpath.csi.k8s.io --endpoint=unix:///csi/csi.sock --nodeid=n1
//	csi-node-driver-registrar --csi-address=/csi/csi.sock --kubelet-registration-path=/var/lib/kubelet/plugins/csi-hostpath/csi.sock
//	livenessprobe --csi-address=/csi/csi.sock --health-port=9898
//
// Flags are read as the upstream programs spell them (`--name=value`, `-name=value`, or a bare
// `--name` for true); a flag this stand-in does not know is logged and ignored, so upstream
// manifests run unchanged. See README.md beside this file for what each part does and does not.
package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

var version = "dev"

// flags holds `--name=value` arguments; a bare `--name` is "true".
type flags map[string]string

func parseFlags(args []string) flags {
	out := flags{}
	for _, arg := range args {
		if !strings.HasPrefix(arg, "-") {
			log.Printf("ignoring argument %q (not a flag)", arg)
			continue
		}
		name, value, found := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !found {
			value = "true"
		}
		out[name] = os.ExpandEnv(value)
	}
	return out
}

func (f flags) str(name, fallback string) string {
	if v, ok := f[name]; ok {
		return v
	}
	return fallback
}

func (f flags) boolean(name string) bool {
	v, err := strconv.ParseBool(f.str(name, "false"))
	return err == nil && v
}

func (f flags) integer(name string, fallback int64) int64 {
	v, err := strconv.ParseInt(f.str(name, ""), 10, 64)
	if err != nil {
		return fallback
	}
	return v
}

// warnUnknown logs each flag not in `known`: upstream manifests pass flags (`--v=5`, feature
// gates) that mean nothing here.
func (f flags) warnUnknown(known ...string) {
	set := map[string]bool{}
	for _, k := range known {
		set[k] = true
	}
	for name, value := range f {
		if !set[name] {
			log.Printf("flag --%s=%s is not used by this stand-in", name, value)
		}
	}
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	role := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch role {
	case "hostpathplugin", "csi-node-driver-registrar", "livenessprobe":
	default:
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: csi-hostpath hostpathplugin|csi-node-driver-registrar|livenessprobe [--flag=value ...]")
			os.Exit(2)
		}
		role, args = args[0], args[1:]
	}
	f := parseFlags(args)
	if f.boolean("version") {
		fmt.Printf("%s %s (nodeagent test stand-in)\n", role, version)
		return
	}
	var err error
	switch role {
	case "hostpathplugin":
		err = runPlugin(f)
	case "csi-node-driver-registrar":
		err = runRegistrar(f)
	case "livenessprobe":
		err = runProbe(f)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		log.Fatalf("%s: %v", role, err)
	}
}
