package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The node service. Staging bind-mounts the volume's directory at the staging path (the
// kubelet's per-volume global mount); publishing bind-mounts the staged directory at the pod's
// target path, read-only when asked. The mounts are made in this container's mount namespace:
// they reach the node through the Bidirectional mount propagation of the kubelet's plugins and
// pods directories, as with the upstream driver.
//
// A block volume is staged without a mount (its loop device is all there is) and published by
// bind-mounting its loop device's node on the target, a file.

func (p *plugin) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             p.nodeID,
		MaxVolumesPerNode:  p.maxVolumes,
		AccessibleTopology: p.topology()[0],
	}, nil
}

func (p *plugin) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	out := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		out.Capabilities = append(out.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return out, nil
}

func (p *plugin) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and staging target path are required")
	}
	block, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
		return nil, err
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
	if p.checkLifecycle && v.AttachedTo != p.nodeID {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not attached to node %s", v.ID, p.nodeID)
	}
	if p.checkLifecycle && v.StagedAt != "" && v.StagedAt != req.GetStagingTargetPath() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is already staged at %s", v.ID, v.StagedAt)
	}
	if v.Block {
		// nothing to mount: the staging path (the kubelet's directory) is left as it is
		if _, err := p.loopOf(v); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else {
		if err := os.MkdirAll(req.GetStagingTargetPath(), 0o750); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := bindMount(p.st.volumePath(v.ID), req.GetStagingTargetPath(), false); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	v.StagedAt = req.GetStagingTargetPath()
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (p *plugin) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and staging target path are required")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	v := p.st.Volumes[req.GetVolumeId()]
	if v != nil && p.checkLifecycle && len(v.Published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published at %v", v.ID, v.Published)
	}
	if v == nil || !v.Block { // a block volume's staging path has no mount of ours
		if err := unmountAll(req.GetStagingTargetPath()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if v != nil {
		v.StagedAt = ""
		if err := p.st.save(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// ephemeralVolume finds or makes the inline volume of a NodePublishVolume (its id is the
// kubelet's per-pod volume handle; a "size" attribute sets its capacity).
func (p *plugin) ephemeralVolume(req *csi.NodePublishVolumeRequest) (*volume, error) {
	if v, ok := p.st.Volumes[req.GetVolumeId()]; ok {
		return v, nil
	}
	capacity := int64(defaultCapacity)
	if size := req.GetVolumeContext()["size"]; size != "" {
		q, err := resource.ParseQuantity(size)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "size %q: %v", size, err)
		}
		capacity = q.Value()
	}
	v := &volume{ID: req.GetVolumeId(), Name: req.GetVolumeId(), Capacity: capacity, Ephemeral: true}
	if err := p.fill(v, nil); err != nil {
		return nil, err
	}
	p.st.Volumes[v.ID] = v
	return v, nil
}

func (p *plugin) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and target path are required")
	}
	block, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
		return nil, err
	}
	ephemeral, _ := strconv.ParseBool(req.GetVolumeContext()[ephemeralContext])
	if ephemeral && block {
		return nil, status.Error(codes.InvalidArgument, "an inline ephemeral volume is a directory: a block capability does not fit it")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	var v *volume
	var source string
	if ephemeral {
		var err error
		if v, err = p.ephemeralVolume(req); err != nil {
			return nil, err
		}
		source = p.st.volumePath(v.ID)
	} else {
		var ok bool
		if v, ok = p.st.Volumes[req.GetVolumeId()]; !ok {
			return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
		}
		if err := checkKind(v, block); err != nil {
			return nil, err
		}
		if req.GetStagingTargetPath() == "" {
			return nil, status.Error(codes.FailedPrecondition, "staging target path missing: this driver stages volumes")
		}
		if p.checkLifecycle && v.StagedAt != req.GetStagingTargetPath() {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s (staged at %q)",
				v.ID, req.GetStagingTargetPath(), v.StagedAt)
		}
		source = req.GetStagingTargetPath()
	}
	if req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		for target := range v.Published {
			if target != req.GetTargetPath() {
				return nil, status.Errorf(codes.FailedPrecondition,
					"volume %s is single-writer and already published at %s", v.ID, target)
			}
		}
	}
	if v.Block {
		// the target is a file, the loop device's node is bound on it
		dev, err := p.loopOf(v)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := makeDeviceTarget(req.GetTargetPath()); err != nil {
			return nil, err
		}
		source = dev
	} else if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	readOnly := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	if err := bindMount(source, req.GetTargetPath(), readOnly); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if v.Published == nil {
		v.Published = map[string]bool{}
	}
	v.Published[req.GetTargetPath()] = true
	if err := p.st.save(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// makeDeviceTarget makes the file a block volume is published at (its parent too, which the
// CO should have made); an existing file (or the device bound there) is kept.
func makeDeviceTarget(target string) error {
	info, err := os.Stat(target)
	if err == nil {
		if info.IsDir() {
			return status.Errorf(codes.InvalidArgument, "target path %s is a directory: a block volume is published at a file", target)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return status.Error(codes.Internal, err.Error())
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o660)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return f.Close()
}

func (p *plugin) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and target path are required")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if err := unmountAll(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(req.GetTargetPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if v, ok := p.st.Volumes[req.GetVolumeId()]; ok {
		delete(v.Published, req.GetTargetPath())
		if v.Ephemeral && len(v.Published) == 0 {
			if err := os.RemoveAll(p.st.volumePath(v.ID)); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			delete(p.st.Volumes, v.ID)
		}
		if err := p.st.save(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (p *plugin) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and volume path are required")
	}
	p.st.mu.Lock()
	v, known := p.st.Volumes[req.GetVolumeId()]
	var block bool
	var dev string
	var capacity int64
	if known {
		block, dev, capacity = v.Block, v.LoopDevice, v.Capacity
	}
	p.st.mu.Unlock()
	if !known {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
	}
	if block {
		// the device's size, and nothing else: a block device has no free space or inodes
		size, err := blockDeviceSize(req.GetVolumePath())
		if err != nil { // not the device (a staging directory): its loop device, its capacity
			if size, err = blockDeviceSize(dev); err != nil {
				size = capacity
			}
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: size},
		}}, nil
	}
	total, avail, used, inodes, ifree, iused, err := fsStats(req.GetVolumePath())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: total, Available: avail, Used: used},
		{Unit: csi.VolumeUsage_INODES, Total: inodes, Available: ifree, Used: iused},
	}}, nil
}

func (p *plugin) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and volume path are required")
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	v, ok := p.st.Volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want > v.Capacity {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, %d asked: expand it on the controller first", v.ID, v.Capacity, want)
	}
	if v.FsType == fsTmpfs {
		// the file system grows on the node, as a block volume's does: every bind mount of
		// the tmpfs (staging path, targets) shows the new size
		if err := resizeTmpfs(p.st.volumePath(v.ID), v.Capacity); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.Capacity}, nil
}
