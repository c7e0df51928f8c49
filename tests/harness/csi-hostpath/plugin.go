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
	p.reattachBlockVolumes()
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

// checkCapabilities says whether the capabilities ask block access (else mount access). Each
// must name one; a list naming both is refused, as a volume is one or the other.
func checkCapabilities(caps []*csi.VolumeCapability) (block bool, err error) {
	if len(caps) == 0 {
		return false, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	var blocks, mounts int
	for _, c := range caps {
		switch {
		case c.GetBlock() != nil:
			blocks++
		case c.GetMount() != nil:
			mounts++
		default:
			return false, status.Error(codes.InvalidArgument, "a volume capability names no access type")
		}
	}
	if blocks > 0 && mounts > 0 {
		return false, status.Error(codes.InvalidArgument,
			"volume capabilities ask both block and mount access: a volume is one or the other")
	}
	return blocks > 0, nil
}

func accessName(block bool) string {
	if block {
		return "block"
	}
	return "mount"
}

// checkKind refuses a capability whose access type is not the volume's.
func checkKind(v *volume, block bool) error {
	if v.Block == block {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "volume %s is a %s volume: a %s capability does not fit it",
		v.ID, accessName(v.Block), accessName(block))
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
	block, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
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
		if v.Block != block {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists as a %s volume", v.Name, accessName(v.Block))
		}
		if v.Capacity < capacity {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes", v.Name, v.Capacity)
		}
		return p.created(v, req), nil
	}
	sourceSize, err := p.checkSource(req.GetVolumeContentSource(), block)
	if err != nil {
		return nil, err
	}
	if sourceSize > capacity {
		// a block volume is at least its source's size: a copy of the source's file
		if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && sourceSize > limit {
			return nil, status.Errorf(codes.OutOfRange, "the source has %d bytes, more than the limit %d", sourceSize, limit)
		}
		capacity = sourceSize
	}
	v := &volume{
		ID: newID(), Name: req.GetName(), Capacity: capacity, Mutable: req.GetMutableParameters(),
		FsType: requestedFsType(req.GetVolumeCapabilities()), Block: block,
	}
	if err := p.fill(v, req.GetVolumeContentSource()); err != nil {
		_ = p.removeData(v)
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

// checkSource checks that a volume's content source exists and is of the volume's access type
// (a block volume is made from a block volume or its snapshot, a directory from a directory);
// it returns the size of a block source.
func (p *plugin) checkSource(source *csi.VolumeContentSource, block bool) (int64, error) {
	var what string
	var sourceBlock bool
	var size int64
	switch {
	case source.GetSnapshot() != nil:
		sn, ok := p.st.Snapshots[source.GetSnapshot().GetSnapshotId()]
		if !ok {
			return 0, status.Errorf(codes.NotFound, "snapshot %q not found", source.GetSnapshot().GetSnapshotId())
		}
		what, sourceBlock, size = "snapshot "+sn.ID, sn.Block, sn.Size
	case source.GetVolume() != nil:
		src, ok := p.st.Volumes[source.GetVolume().GetVolumeId()]
		if !ok {
			return 0, status.Errorf(codes.NotFound, "volume %q not found", source.GetVolume().GetVolumeId())
		}
		what, sourceBlock, size = "volume "+src.ID, src.Block, src.Capacity
	default:
		return 0, nil
	}
	if sourceBlock != block {
		return 0, status.Errorf(codes.InvalidArgument, "%s is of a %s volume: a %s volume cannot be made from it",
			what, accessName(sourceBlock), accessName(block))
	}
	if !block {
		return 0, nil
	}
	return size, nil
}

// fill makes the volume's directory (a tmpfs of its capacity mounted on it for fsTmpfs):
// empty, or a copy of a snapshot or of another volume. A block volume's file is made by
// fillBlock.
func (p *plugin) fill(v *volume, source *csi.VolumeContentSource) error {
	if v.Block {
		return p.fillBlock(v, source)
	}
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

// fillBlock makes a block volume's file, sparse, of its capacity: empty, or a copy of a
// snapshot's file or of another block volume's, grown to the capacity; and attaches it to a
// loop device. The caller has checked the source (checkSource).
func (p *plugin) fillBlock(v *volume, source *csi.VolumeContentSource) error {
	file := p.st.volumePath(v.ID)
	var err error
	switch {
	case source.GetSnapshot() != nil:
		_, err = copySparse(p.st.snapshotPath(source.GetSnapshot().GetSnapshotId()), file)
	case source.GetVolume() != nil:
		src := p.st.Volumes[source.GetVolume().GetVolumeId()]
		if err := syncLoop(src.LoopDevice); err != nil && src.LoopDevice != "" {
			log.Printf("volume %s: flushing %s before the copy: %v", src.ID, src.LoopDevice, err)
		}
		_, err = copySparse(p.st.volumePath(src.ID), file)
	default:
		err = makeImage(file, v.Capacity)
	}
	if err == nil {
		err = os.Truncate(file, v.Capacity)
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if v.LoopDevice, err = attachLoop(file); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// loopOf returns the block volume's loop device, attaching its file again when no device
// is attached to it any more; the caller holds the store's lock.
func (p *plugin) loopOf(v *volume) (string, error) {
	dev, err := ensureLoop(p.st.volumePath(v.ID), v.LoopDevice)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", v.ID, err)
	}
	if dev != v.LoopDevice {
		log.Printf("volume %s: its file is attached to %s (recorded: %q)", v.ID, dev, v.LoopDevice)
		v.LoopDevice = dev
		if err := p.st.save(); err != nil {
			return "", err
		}
	}
	return dev, nil
}

// reattachBlockVolumes finds the loop devices of the block volumes at start: a restarted
// plugin (or node) may have lost them.
func (p *plugin) reattachBlockVolumes() {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	for _, v := range p.st.Volumes {
		if !v.Block {
			continue
		}
		if dev, err := p.loopOf(v); err != nil {
			log.Printf("block volume %s has no loop device: %v", v.ID, err)
		} else {
			log.Printf("block volume %s is on %s", v.ID, dev)
		}
	}
}

// removeData removes a volume's directory (unmounting a tmpfs) or a block volume's file
// (detaching its loop devices).
func (p *plugin) removeData(v *volume) error {
	path := p.st.volumePath(v.ID)
	if v.Block {
		if err := detachLoops(path, v.LoopDevice); err != nil {
			return err
		}
	} else if err := unmountAll(path); err != nil {
		return err
	}
	return os.RemoveAll(path)
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
	if err := p.removeData(v); err != nil {
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
	block, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
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
	if err := checkKind(v, block); err != nil {
		return nil, err
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
	v, ok := p.st.Volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	block, err := checkCapabilities(req.GetVolumeCapabilities())
	if err == nil {
		err = checkKind(v, block)
	}
	if err != nil {
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
		if v.Block {
			if err := p.growBlock(v, capacity); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		v.Capacity = capacity
		if err := p.st.save(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	// A block volume is grown here, file and loop device: there is no file system for the
	// node to grow.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.Capacity, NodeExpansionRequired: !v.Block}, nil
}

// growBlock grows a block volume's file to `capacity` bytes and its loop device with it.
func (p *plugin) growBlock(v *volume, capacity int64) error {
	if err := os.Truncate(p.st.volumePath(v.ID), capacity); err != nil {
		return err
	}
	dev, err := p.loopOf(v)
	if err != nil {
		return err
	}
	return growLoop(dev)
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
	src, ok := p.st.Volumes[req.GetSourceVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetSourceVolumeId())
	}
	sn := &snapshot{ID: newID(), Name: req.GetName(), Source: src.ID, CreatedNs: time.Now().UnixNano(), Block: src.Block}
	var size int64
	var err error
	if src.Block {
		// a copy of the file, after what the device caches is written to it
		if err := syncLoop(src.LoopDevice); err != nil && src.LoopDevice != "" {
			log.Printf("volume %s: flushing %s before the snapshot: %v", src.ID, src.LoopDevice, err)
		}
		size, err = copySparse(p.st.volumePath(src.ID), p.st.snapshotPath(sn.ID))
	} else {
		size, err = copyTree(p.st.volumePath(src.ID), p.st.snapshotPath(sn.ID))
	}
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
