package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// keepOwner gives `path` the owner of `info` (a copy keeps the fsGroup the kubelet applied).
func keepOwner(path string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}

// unescapeMountinfo undoes the octal escapes of /proc/self/mountinfo (space, tab, newline, \).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint says whether `path` is a mount point in this mount namespace.
func isMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	scan := bufio.NewScanner(f)
	scan.Buffer(make([]byte, 64*1024), 1024*1024)
	for scan.Scan() {
		fields := strings.Fields(scan.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == path {
			return true, nil
		}
	}
	return false, scan.Err()
}

// bindMount mounts `src` at `target` (which exists), read-only if asked; a target already
// mounted is left as it is (the call is idempotent).
func bindMount(src, target string, readOnly bool) error {
	mounted, err := isMountPoint(target)
	if err != nil {
		return err
	}
	if mounted {
		return nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", src, target, err)
	}
	if readOnly {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// mountTmpfs mounts a tmpfs of `size` bytes, world-writable as the upstream driver's
// directories are, on `dir` (created); a dir already mounted is left as it is.
func mountTmpfs(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	mounted, err := isMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0777", size)); err != nil {
		return fmt.Errorf("mount a tmpfs of %d bytes at %s: %w", size, dir, err)
	}
	return nil
}

// resizeTmpfs gives the tmpfs mounted on `dir` the size `size` bytes.
func resizeTmpfs(dir string, size int64) error {
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
		return fmt.Errorf("remount the tmpfs at %s with %d bytes: %w", dir, size, err)
	}
	return nil
}

// unmountAll unmounts `target` until it is no mount point (bind mounts can stack); a path
// that does not exist is done.
func unmountAll(target string) error {
	for {
		mounted, err := isMountPoint(target)
		if err != nil {
			return err
		}
		if !mounted {
			return nil
		}
		if err := unix.Unmount(target, 0); err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
}

// fsStats is the statfs of `path`: bytes total/available/used and inodes total/free/used.
func fsStats(path string) (total, avail, used, inodes, ifree, iused int64, err error) {
	var st unix.Statfs_t
	if err = unix.Statfs(path, &st); err != nil {
		return
	}
	bsize := int64(st.Bsize)
	total = int64(st.Blocks) * bsize
	avail = int64(st.Bavail) * bsize
	used = (int64(st.Blocks) - int64(st.Bfree)) * bsize
	inodes = int64(st.Files)
	ifree = int64(st.Ffree)
	iused = inodes - ifree
	return
}
