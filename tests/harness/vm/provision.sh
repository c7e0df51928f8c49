#!/bin/bash
# Provision a Debian 12 host (the test VM or a Vagrant box) with nodeagent, exactly as an operator
# would: host checks, a swap file, `apt-get install ./nodeagent_*.deb`, config and kubeconfig,
# then `systemctl enable --now nodeagent`. Idempotent: running it again re-applies the settings
# and restarts the service. Run as root on the host being provisioned.
#
#   provision.sh --deb FILE [--kubeconfig FILE | --join "ENDPOINT --token ... --discovery-..."]
#                [--config FILE] [--node-name NAME] [--node-ip IP] [--extra-args "FLAGS"]
#                [--swap-size SIZE] [--apt-update] [--pod-subnet CIDR | --no-pod-network]
#                [--registry-hosts DIR] [--no-start]
#
#   --deb          the package to install (apt resolves its dependencies; in the test VM they are
#                  already in the image, so nothing is downloaded)
#   --kubeconfig   installed as /etc/nodeagent/kubeconfig (0600) and passed as --kubeconfig
#   --join         join a cluster instead: the arguments of the `nodeagent join ...` line the
#                  control plane printed. Whatever credentials the node had are removed first
#                  (the agent's part of `kubeadm reset`), then `nodeagent join` verifies the
#                  cluster, writes the bootstrap kubeconfig and its flags, restarts the service
#                  and waits for TLS bootstrap; --node-name/--node-ip go to the join
#   --config       installed as /etc/nodeagent/config.yaml (replaces the packaged default)
#   --node-name    passed as --hostname-override;  --node-ip: passed as --node-ip
#   --extra-args   appended to NODEAGENT_ARGS in /etc/default/nodeagent
#   --swap-size    size of /swapfile (default 256M; 0 = no swap file)
#   --apt-update   run `apt-get update` first when a dependency of the .deb is missing (a Vagrant
#                  box with network access); a host that has them all installs offline
#   --pod-subnet   the bridge pod network written when no CNI config exists (default 10.244.0.0/24)
#   --no-pod-network  write no pod network: the cluster's CNI DaemonSet (flannel) installs its
#                  own config and plugin, as on a kubeadm node; until then the node is NotReady
#   --registry-hosts  containerd's registry hosts: DIR holds <registry>/hosts.toml files (the
#                  mirrors a cluster's nodes use, e.g. a local registry for docker.io and
#                  registry.k8s.io); installed as /etc/containerd/certs.d, named by containerd's
#                  config_path, containerd restarted
#   --no-start     install and configure only
set -euo pipefail

deb="" kubeconfig="" join="" config="" node_name="" node_ip="" extra_args="" swap_size=256M
apt_update=0 start=1 pod_subnet=10.244.0.0/24 pod_network=1 registry_hosts=""
SWAP_FILE=/swapfile
ETC=/etc/nodeagent
DEFAULTS=/etc/default/nodeagent
REQUIRED_CONTROLLERS="cpu cpuset io memory pids"
CERTS_DIR=/etc/containerd/certs.d
CONTAINERD_CONFIG=/etc/containerd/config.toml

die() { printf 'provision: %s\n' "$*" >&2; exit 1; }
log() { printf 'provision: %s\n' "$*"; }

while (($#)); do
    case $1 in
        --deb) deb=$2; shift ;;
        --kubeconfig) kubeconfig=$2; shift ;;
        --join) join=$2; shift ;;
        --config) config=$2; shift ;;
        --node-name) node_name=$2; shift ;;
        --node-ip) node_ip=$2; shift ;;
        --extra-args) extra_args=$2; shift ;;
        --swap-size) swap_size=$2; shift ;;
        --apt-update) apt_update=1 ;;
        --pod-subnet) pod_subnet=$2; shift ;;
        --no-pod-network) pod_network=0 ;;
        --registry-hosts) registry_hosts=$2; shift ;;
        --no-start) start=0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
[[ -n $deb ]] || die "--deb FILE is required"
[[ -f $deb ]] || die "no such package: $deb"
[[ $(id -u) == 0 ]] || die "must run as root"
[[ -z $join || -z $kubeconfig ]] || die "--kubeconfig and --join exclude each other"
[[ -z $registry_hosts || -d $registry_hosts ]] ||
    die "--registry-hosts: no such directory: $registry_hosts"

check_host() {
    [[ -d /run/systemd/system ]] || die "systemd is not PID 1 on this host"
    local fs
    fs=$(stat -fc %T /sys/fs/cgroup)
    [[ $fs == cgroup2fs ]] ||
        die "/sys/fs/cgroup is $fs, not cgroup2fs: boot with systemd.unified_cgroup_hierarchy=1"
    local have c
    have=" $(cat /sys/fs/cgroup/cgroup.controllers) "
    for c in $REQUIRED_CONTROLLERS; do
        [[ $have == *" $c "* ]] || die "cgroup v2 controller '$c' missing (have:$have)"
    done
    log "cgroup v2 with controllers:$have"
}

ensure_swap() {
    [[ $swap_size != 0 ]] || return 0
    if ! swapon --show=NAME --noheadings | grep -qx "$SWAP_FILE"; then
        if [[ ! -f $SWAP_FILE ]]; then
            # fallocate gives a file without holes on ext4/xfs; dd is the portable fallback.
            fallocate -l "$swap_size" "$SWAP_FILE" 2>/dev/null ||
                dd if=/dev/zero of="$SWAP_FILE" bs=1M count=$(($(numfmt --from=iec "$swap_size") >> 20)) status=none
            chmod 600 "$SWAP_FILE"
            mkswap "$SWAP_FILE" >/dev/null
        fi
        swapon "$SWAP_FILE"
    fi
    grep -qE "^$SWAP_FILE[[:space:]]" /etc/fstab || echo "$SWAP_FILE none swap sw 0 0" >>/etc/fstab
    log "swap: $(swapon --show=NAME,SIZE --noheadings | tr -s ' ' | paste -sd ';')"
}

# What kubeadm's install guide asks of a node before a CNI DaemonSet runs on it: br_netfilter
# loaded (flanneld exits with "Failed to check br_netfilter: stat
# /proc/sys/net/bridge/bridge-nf-call-iptables" without it), bridged traffic through the
# netfilter hooks, forwarding on. Kept across boots in modules-load.d and sysctl.d.
ensure_cni_prerequisites() {
    printf 'br_netfilter\n' >/etc/modules-load.d/nodeagent-cni.conf
    modprobe br_netfilter
    printf '%s\n' 'net.bridge.bridge-nf-call-iptables = 1' 'net.ipv4.ip_forward = 1' \
        >/etc/sysctl.d/90-nodeagent-cni.conf
    sysctl -q -p /etc/sysctl.d/90-nodeagent-cni.conf
    log "CNI prerequisites: br_netfilter loaded, bridge-nf-call-iptables and ip_forward on"
}

# A node needs a pod network for the runtime's NetworkReady; a cluster's CNI plugin normally
# installs one. Without any, write a plain bridge network (no masquerade) so containerd reports
# the network ready and pods get addresses.
ensure_pod_network() {
    local dir=/etc/cni/net.d
    # containerd looks for plugins in /opt/cni/bin by default (and a CNI DaemonSet installs its
    # plugin there); Debian installs them in /usr/lib/cni.
    if [[ ! -e /opt/cni/bin ]]; then
        install -d /opt/cni
        ln -s /usr/lib/cni /opt/cni/bin
    fi
    if ((!pod_network)); then
        rm -f "$dir/10-nodeagent-bridge.conflist"
        ensure_cni_prerequisites
        log "no pod network written: the cluster's CNI DaemonSet installs one"
        return 0
    fi
    if compgen -G "$dir/*.conf*" >/dev/null; then
        log "CNI config present in $dir"
        return 0
    fi
    install -d -m 0755 "$dir"
    cat >"$dir/10-nodeagent-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "nodeagent",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    if [[ -d /run/systemd/system ]]; then systemctl restart containerd; fi
    log "wrote a bridge CNI network ($pod_subnet) in $dir"
}

# True when installing the .deb needs anything apt would download: its plan (a simulation, from
# the package lists present) installs more than nodeagent itself, or apt cannot plan it at all.
needs_download() {
    local plan
    plan=$(apt-get install -s -q "$1" 2>/dev/null) || return 0
    grep '^Inst ' <<<"$plan" | grep -qv '^Inst nodeagent '
}

install_package() {
    export DEBIAN_FRONTEND=noninteractive
    # apt needs a path with a slash to treat the argument as a file.
    local path
    path=$(realpath "$deb")
    if ((apt_update)) && needs_download "$path"; then apt-get update -q; fi
    apt-get install -y -q "$path"
    log "installed $(dpkg-query -W -f='${Package} ${Version}' nodeagent)"
}

# containerd pulls through the registry hosts given (after the package: a host without
# containerd gets it as the .deb's dependency). Debian's config.toml defines no registry table,
# so one appended is valid TOML.
use_registry_hosts() {
    [[ -n $registry_hosts ]] || return 0
    install -d -m 0755 "$CERTS_DIR"
    cp -rT "$registry_hosts" "$CERTS_DIR"
    if ! grep -q '^ *config_path' "$CONTAINERD_CONFIG" 2>/dev/null; then
        printf '\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' \
            "$CERTS_DIR" >>"$CONTAINERD_CONFIG"
    fi
    systemctl restart containerd
    log "containerd pulls through $CERTS_DIR: $(cd "$CERTS_DIR" && echo */ | tr -d /)"
}

configure() {
    install -d -m 0755 "$ETC"
    [[ -z $config ]] || install -m 0644 "$config" "$ETC/config.yaml"
    local args=()
    if [[ -n $kubeconfig ]]; then
        install -m 0600 "$kubeconfig" "$ETC/kubeconfig"
        args+=("--kubeconfig=$ETC/kubeconfig")
    fi
    if [[ -z $join ]]; then # with --join, `nodeagent join` writes them to its flags file
        [[ -z $node_name ]] || args+=("--hostname-override=$node_name")
        [[ -z $node_ip ]] || args+=("--node-ip=$node_ip")
    fi
    [[ -z $extra_args ]] || args+=("$extra_args")
    local line="NODEAGENT_ARGS=\"${args[*]}\""
    local rest
    rest=$(grep -v '^NODEAGENT_ARGS=' "$DEFAULTS" 2>/dev/null || true)
    printf '%s\n%s\n' "$rest" "$line" >"$DEFAULTS"
    log "$DEFAULTS: $line"
}

start_service() {
    ((start)) || return 0
    systemctl daemon-reload
    if systemctl is-active --quiet nodeagent; then
        systemctl restart nodeagent
    else
        systemctl enable --now nodeagent
    fi
    # Type=notify: start returns once the daemon sent READY=1 (or failed).
    if ! systemctl is-active --quiet nodeagent; then
        systemctl status --no-pager nodeagent || true
        journalctl -u nodeagent --no-pager -n 50 || true
        die "nodeagent.service is not active"
    fi
    log "nodeagent.service is active (MainPID $(systemctl show -p MainPID --value nodeagent))"
}

# The agent's part of `kubeadm reset`: stop it and drop every credential it had, so the join
# starts from nothing but the token and the CA hash. Done before the package is installed too:
# its postinst starts the agent, which with a removed package's leftover credentials would
# register the Node again, and the join would refuse a Ready Node of its own name.
reset_agent() {
    systemctl stop nodeagent 2>/dev/null || true
    rm -f "$ETC/kubeconfig" "$ETC/bootstrap-kubeconfig" /var/lib/nodeagent/join-flags.env
    rm -rf /var/lib/nodeagent/pki
}

join_cluster() {
    ((start)) || return 0
    systemctl daemon-reload
    systemctl enable nodeagent
    reset_agent
    local args
    read -r -a args <<<"$join"
    [[ -z $node_name ]] || args+=(--node-name "$node_name")
    [[ -z $node_ip ]] || args+=(--node-ip "$node_ip")
    # Restarts nodeagent.service and waits until TLS bootstrap wrote the node's kubeconfig.
    if ! nodeagent join "${args[@]}"; then
        journalctl -u nodeagent --no-pager -n 50 || true
        die "nodeagent join failed"
    fi
    # The join waited for TLS bootstrap; the unit's start (Type=notify) may still be under way
    # on a slow host, or be retried by systemd after a start timeout.
    local i
    for ((i = 0; i < 120; i++)); do
        systemctl is-active --quiet nodeagent && break
        sleep 2
    done
    if ! systemctl is-active --quiet nodeagent; then
        systemctl status --no-pager nodeagent || true
        die "nodeagent.service is not active after the join"
    fi
    log "joined; nodeagent.service is active (MainPID $(systemctl show -p MainPID --value nodeagent))"
}

check_host
ensure_swap
ensure_pod_network
[[ -z $join ]] || reset_agent
install_package
use_registry_hosts
configure
if [[ -n $join ]]; then join_cluster; else start_service; fi
