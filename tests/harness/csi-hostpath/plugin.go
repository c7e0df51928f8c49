package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	topologyKey      = "topology.hostpath.csi/node" // as the upstream driver names it
	ephemeralContext = "csi.storage.k8s.io/ephemeral"
	defaultCapacity  = 1 << 30
	// fsTmpfs: a volume whose mount capability asks this fs type (the StorageClass parameter
	// csi.storage.k8s.io/fstype) is a tmpfs of its capacity, so a pod sees its size and an
	// online expansion (NodeExpandVolume remounts it larger).
	fsTmpfs = "tmpfs"
)

// plugin serves the CSI Identity, Controller and Node services over one socket, as the
// upstream hostpath driver does (one pod runs it with the controller sidecars).
type plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	name           string
	nodeID         string
	maxVolumes     int64
	checkLifecycle bool
	modify         bool
	mutableNames   map[string]bool
	st             *store
}

func runPlugin(f flags) error {
	f.warnUnknown("drivername", "endpoint", "nodeid", "statedir", "datadir", "maxvolumespernode",
		"check-volume-lifecycle", "enable-controller-modify-volume",
		"accepted-mutable-parameter-names")
	p := &plugin{
		name:           f.str("drivername", "hostpath.csi.k8s.io"),
		nodeID:         f.str("nodeid", ""),
		maxVolumes:     f.integer("maxvolumespernode", 0),
		checkLifecycle: f.boolean("check-volume-lifecycle"),
		modify:         f.boolean("enable-controller-modify-volume"),
		mutableNames:   map[string]bool{},
	}
	if p.nodeID == "" {
		return errors.New("--nodeid is required")
	}
	for _, n := range strings.Split(f.str("accepted-mutable-parameter-names", ""), ",") {
		if n = strings.TrimSpace(n); n != "" {
			p.mutableNames[n] = true
		}
	}
	st, err := openStore(f.str("datadir", f.str("statedir", "/csi-data-dir")))
	if err != nil {
		return err
	}
	p.st = st
	listener, path, err := listen(f.str("endpoint", "unix:///csi/csi.sock"))
	if err != nil {
		return err
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(server, p)
	csi.RegisterControllerServer(server, p)
	csi.RegisterNodeServer(server, p)
	stopOnSignal(server, path)
	log.Printf("hostpathplugin %s: driver %s, node %s, data in %s, serving %s",
		version, p.name, p.nodeID, st.dir, path)
	return server.Serve(listener)
}

// listen opens a unix socket endpoint (`unix:///path` or a bare path), replacing a stale file.
func listen(endpoint string) (net.Listener, string, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if strings.Contains(path, "://") {
		return nil, "", fmt.Errorf("endpoint %q: only unix sockets are served", endpoint)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, "", err
	}
	l, err := net.Listen("unix", path)
	return l, path, err
}

func stopOnSignal(server *grpc.Server, socket string) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		got := <-signals
		log.Printf("%v: stopping", got)
		server.GracefulStop()
		_ = os.Remove(socket)
		os.Exit(0)
	}()
}

func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	started := time.Now()
	resp, err := next(ctx, req)
	if err != nil {
		log.Printf("%s(%v) -> error %v (%s)", info.FullMethod, req, err, time.Since(started))
	} else {
		log.Printf("%s(%v) -> %v (%s)", info.FullMethod, req, resp, time.Since(started))
	}
	return resp, err
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (p *plugin) topology() []*csi.Topology {
	return []*csi.Topology{{Segments: map[string]string{topologyKey: p.nodeID}}}
}

// --- Identity ---------------------------------------------------------------------------------

func (p *plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: p.name, VendorVersion: version}, nil
}

func (p *plugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	expansion := func(t csi.PluginCapability_VolumeExpansion_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: t}}}
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		service(csi.PluginCapability_Service_CONTROLLER_SERVICE),
		service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		expansion(csi.PluginCapability_VolumeExpansion_ONLINE),
		expansion(csi.PluginCapability_VolumeExpansion_OFFLINE),
	}}, nil
}

func (p *plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil // Ready unset means ready
}

// --- capabilities checks -------------------------------------------------------------------------

func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return status.Error(codes.InvalidArgument, "volumeMode Block is not supported by this stand-in hostpath driver")
		}
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "a volume capability names no access type")
		}
	}
	return nil
}

func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

func (p *plugin) checkMutable(params map[string]string) error {
	for k := range params {
		if !p.mutableNames[k] {
			return status.Errorf(codes.InvalidArgument, "mutable parameter %q is not accepted", k)
		}
	}
	return nil
}

// --- Controller ---------------------------------------------------------------------------------

func (p *plugin) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if p.modify {
		types = append(types, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME)
	}
	out := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		out.Capabilities = append(out.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return out, nil
}

func wantedCapacity(r *csi.CapacityRange) (int64, error) {
	want := r.GetRequiredBytes()
	if want == 0 {
		want = r.GetLimitBytes()
	}
	if want == 0 {
		want = defaultCapacity
	}
	if limit := r.GetLimitBytes(); limit > 0 && want > limit {
		return 0, status.Errorf(codes.OutOfRange, "required %d bytes exceed the limit %d", want, limit)
	}
	return want, nil
}

func (p *plugin) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if err := p.checkMutable(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	capacity, err := wantedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if v := p.st.volumeByName(req.GetName()); v != nil {
		if v.Capacity < capacity {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes", v.Name, v.Capacity)
		}
		return p.created(v, req), nil
	}
	v := &volume{
		ID: newID(), Name: req.GetName(), Capacity: capacity, Mutable: req.GetMutableParameters(),
		FsType: requestedFsType(req.GetVolumeCapabilities()),
	}
	if err := p.fill(v, req.GetVolumeContentSource()); err != nil {
		_ = unmountAll(p.st.volumePath(v.ID))
		_ = os.RemoveAll(p.st.volumePath(v.ID))
		return nil, err
	}
	p.st.Volumes[v.ID] = v
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return p.created(v, req), nil
}

// requestedFsType is fsTmpfs when a mount capability asks for it; any other fs type is a
// plain directory, as the upstream driver's mount volumes are.
func requestedFsType(caps []*csi.VolumeCapability) string {
	for _, c := range caps {
		if c.GetMount().GetFsType() == fsTmpfs {
			return fsTmpfs
		}
	}
	return ""
}

// fill makes the volume's directory (a tmpfs of its capacity mounted on it for fsTmpfs):
// empty, or a copy of a snapshot or of another volume.
func (p *plugin) fill(v *volume, source *csi.VolumeContentSource) error {
	dir := p.st.volumePath(v.ID)
	if v.FsType == fsTmpfs {
		if err := mountTmpfs(dir, v.Capacity); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	switch {
	case source.GetSnapshot() != nil:
		sn, ok := p.st.Snapshots[source.GetSnapshot().GetSnapshotId()]
		if !ok {
			return status.Errorf(codes.NotFound, "snapshot %q not found", source.GetSnapshot().GetSnapshotId())
		}
		if _, err := copyTree(p.st.snapshotPath(sn.ID), dir); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	case source.GetVolume() != nil:
		src, ok := p.st.Volumes[source.GetVolume().GetVolumeId()]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %q not found", source.GetVolume().GetVolumeId())
		}
		if _, err := copyTree(p.st.volumePath(src.ID), dir); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	default:
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		// The upstream driver's directories are world-writable, so that a pod of any uid can
		// write to a new volume; fsGroup narrows that when the pod asks.
		if err := os.Chmod(dir, 0o777); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return nil
}

func (p *plugin) created(v *volume, req *csi.CreateVolumeRequest) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           v.ID,
		CapacityBytes:      v.Capacity,
		VolumeContext:      req.GetParameters(),
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: p.topology(),
	}}
}

func (p *plugin) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	v, ok := p.st.Volumes[req.GetVolumeId()]
	if !ok {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if p.checkLifecycle && (v.AttachedTo != "" || v.StagedAt != "" || len(v.Published) > 0) {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %s is still in use (attached to %q, staged at %q, published at %v)",
			v.ID, v.AttachedTo, v.StagedAt, v.Published)
	}
	if err := unmountAll(p.st.volumePath(v.ID)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.RemoveAll(p.st.volumePath(v.ID)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	delete(p.st.Volumes, v.ID)
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (p *plugin) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and node id are required")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	if req.GetNodeId() != p.nodeID {
		return nil, status.Errorf(codes.NotFound, "node %q not found (this driver serves %q)", req.GetNodeId(), p.nodeID)
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	v, ok := p.st.Volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	v.AttachedTo = req.GetNodeId()
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{}}, nil
}

func (p *plugin) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if v, ok := p.st.Volumes[req.GetVolumeId()]; ok {
		if p.checkLifecycle && (v.StagedAt != "" || len(v.Published) > 0) {
			return nil, status.Errorf(codes.FailedPrecondition,
				"volume %s is still staged at %q or published at %v", v.ID, v.StagedAt, v.Published)
		}
		v.AttachedTo = ""
		if err := p.st.save(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (p *plugin) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if _, ok := p.st.Volumes[req.GetVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil // not confirmed
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (p *plugin) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	_, avail, _, _, _, _, err := fsStats(p.st.dir)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.GetCapacityResponse{AvailableCapacity: avail}, nil
}

func (p *plugin) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	capacity, err := wantedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	v, ok := p.st.Volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if capacity > v.Capacity {
		v.Capacity = capacity
		if err := p.st.save(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.Capacity, NodeExpansionRequired: true}, nil
}

func (p *plugin) ControllerModifyVolume(_ context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	if !p.modify {
		return nil, status.Error(codes.Unimplemented, "ControllerModifyVolume is not enabled (--enable-controller-modify-volume)")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if err := p.checkMutable(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	v, ok := p.st.Volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if v.Mutable == nil {
		v.Mutable = map[string]string{}
	}
	for k, val := range req.GetMutableParameters() {
		v.Mutable[k] = val
	}
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

func (p *plugin) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" || req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "name and source volume id are required")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if sn := p.st.snapshotByName(req.GetName()); sn != nil {
		if sn.Source != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for volume %s", sn.Name, sn.Source)
		}
		return &csi.CreateSnapshotResponse{Snapshot: snapshotMessage(sn)}, nil
	}
	if _, ok := p.st.Volumes[req.GetSourceVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetSourceVolumeId())
	}
	sn := &snapshot{ID: newID(), Name: req.GetName(), Source: req.GetSourceVolumeId(), CreatedNs: time.Now().UnixNano()}
	size, err := copyTree(p.st.volumePath(sn.Source), p.st.snapshotPath(sn.ID))
	if err != nil {
		_ = os.RemoveAll(p.st.snapshotPath(sn.ID))
		return nil, status.Error(codes.Internal, err.Error())
	}
	sn.Size = size
	p.st.Snapshots[sn.ID] = sn
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshotMessage(sn)}, nil
}

func snapshotMessage(sn *snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     sn.ID,
		SourceVolumeId: sn.Source,
		SizeBytes:      sn.Size,
		CreationTime:   timestamppb.New(time.Unix(0, sn.CreatedNs)),
		ReadyToUse:     true,
	}
}

func (p *plugin) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot id missing")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if _, ok := p.st.Snapshots[req.GetSnapshotId()]; ok {
		if err := os.RemoveAll(p.st.snapshotPath(req.GetSnapshotId())); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		delete(p.st.Snapshots, req.GetSnapshotId())
		if err := p.st.save(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (p *plugin) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	var matching []*snapshot
	for _, sn := range p.st.Snapshots {
		if id := req.GetSnapshotId(); id != "" && id != sn.ID {
			continue
		}
		if src := req.GetSourceVolumeId(); src != "" && src != sn.Source {
			continue
		}
		matching = append(matching, sn)
	}
	sort.Slice(matching, func(i, j int) bool { return matching[i].ID < matching[j].ID })
	// The token is the index of the next entry, in id order.
	start := 0
	if token := req.GetStartingToken(); token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(matching) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not valid", token)
		}
		start = n
	}
	end := len(matching)
	if limit := int(req.GetMaxEntries()); limit > 0 && start+limit < end {
		end = start + limit
	}
	out := &csi.ListSnapshotsResponse{}
	for _, sn := range matching[start:end] {
		out.Entries = append(out.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshotMessage(sn)})
	}
	if end < len(matching) {
		out.NextToken = strconv.Itoa(end)
	}
	return out, nil
}
