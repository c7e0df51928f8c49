package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Pure parts of the block volumes: no root, no loop devices.

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
}

func TestCheckCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		caps  []*csi.VolumeCapability
		block bool
		code  codes.Code
	}{
		{"block", []*csi.VolumeCapability{blockCap(), blockCap()}, true, codes.OK},
		{"mount", []*csi.VolumeCapability{mountCap()}, false, codes.OK},
		{"mixed", []*csi.VolumeCapability{mountCap(), blockCap()}, false, codes.InvalidArgument},
		{"none", nil, false, codes.InvalidArgument},
		{"no access type", []*csi.VolumeCapability{{}}, false, codes.InvalidArgument},
		{"nil", []*csi.VolumeCapability{nil}, false, codes.InvalidArgument},
	} {
		block, err := checkCapabilities(tc.caps)
		if got := status.Code(err); got != tc.code || block != tc.block {
			t.Errorf("%s: got block=%v %v, want block=%v %v", tc.name, block, err, tc.block, tc.code)
		}
	}
}

func TestCheckKind(t *testing.T) {
	if err := checkKind(&volume{ID: "b", Block: true}, true); err != nil {
		t.Errorf("block volume, block capability: %v", err)
	}
	if err := checkKind(&volume{ID: "m"}, false); err != nil {
		t.Errorf("mount volume, mount capability: %v", err)
	}
	err := checkKind(&volume{ID: "b", Block: true}, false)
	if status.Code(err) != codes.InvalidArgument || !bytes.Contains([]byte(err.Error()), []byte("a block volume: a mount capability")) {
		t.Errorf("block volume, mount capability: %v", err)
	}
	err = checkKind(&volume{ID: "m"}, true)
	if status.Code(err) != codes.InvalidArgument || !bytes.Contains([]byte(err.Error()), []byte("a mount volume: a block capability")) {
		t.Errorf("mount volume, block capability: %v", err)
	}
}

func TestLoopNumbers(t *testing.T) {
	for in, want := range map[string]int{"/dev/loop7": 7, "loop12": 12, "/dev/sda": -1, "/dev/loop": -1, "/dev/loop-control": -1, "": -1} {
		if got := loopNumber(in); got != want {
			t.Errorf("loopNumber(%q) = %d, want %d", in, got, want)
		}
	}
	if major, minor, err := parseDevNumbers("7:3\n"); err != nil || major != 7 || minor != 3 {
		t.Errorf("parseDevNumbers(7:3) = %d %d %v", major, minor, err)
	}
	for _, bad := range []string{"", "7", "a:b", "7:"} {
		if _, _, err := parseDevNumbers(bad); err == nil {
			t.Errorf("parseDevNumbers(%q) took it", bad)
		}
	}
}

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	const size = 8<<20 + 123 // data in a hole-y file that does not end on a block
	if err := makeImage(src, size); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	marks := map[int64][]byte{0: []byte("start"), 3 << 20: bytes.Repeat([]byte{0xab}, 5000), size - 4: []byte("end!")}
	for off, data := range marks {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	n, err := copySparse(src, filepath.Join(dir, "dst"))
	if err != nil || n != size {
		t.Fatalf("copySparse: %d %v", n, err)
	}
	want, _ := os.ReadFile(src)
	got, _ := os.ReadFile(filepath.Join(dir, "dst"))
	if !bytes.Equal(got, want) {
		t.Fatal("the copy differs")
	}
	// where the file system keeps holes (src is sparse), the copy keeps them
	var srcSt, dstSt syscall.Stat_t
	if syscall.Stat(src, &srcSt) == nil && syscall.Stat(filepath.Join(dir, "dst"), &dstSt) == nil &&
		srcSt.Blocks*512 < size/2 && dstSt.Blocks*512 >= size/2 {
		t.Errorf("the copy is not sparse: %d bytes allocated of %d", dstSt.Blocks*512, size)
	}
	if _, err := copySparse(src, filepath.Join(dir, "dst")); err == nil {
		t.Error("copySparse overwrote an existing file")
	}
}
