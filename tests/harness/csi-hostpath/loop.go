package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Loop devices for the block volumes, through the kernel's ioctls (the image is one static
// binary: there is no losetup to run). A block volume is a sparse file of its capacity in the
// data dir, attached to a loop device when it is created; the device stays attached across
// plugin restarts (no autoclear), and a starting plugin looks its devices up again.

const (
	loopControl = "/dev/loop-control"
	loopMajor   = 7 // the block major of loop devices, when sysfs does not say
	// attachTries bounds the race with other programs taking the free device we were given.
	attachTries = 16
)

// loopDev is /dev/loopN.
func loopDev(n int) string { return "/dev/loop" + strconv.Itoa(n) }

// loopNumber is N of /dev/loopN (or of loopN), -1 when `dev` names no loop device.
func loopNumber(dev string) int {
	rest, ok := strings.CutPrefix(filepath.Base(dev), "loop")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// parseDevNumbers reads sysfs's "major:minor" (as in /sys/block/loopN/dev).
func parseDevNumbers(s string) (major, minor uint32, err error) {
	maj, min, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not major:minor", s)
	}
	a, err := strconv.ParseUint(maj, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%q is not major:minor", s)
	}
	b, err := strconv.ParseUint(min, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%q is not major:minor", s)
	}
	return uint32(a), uint32(b), nil
}

// ensureLoopNode makes /dev/loopN when the kernel's devtmpfs has not (a /dev that is a plain
// tmpfs): a block node of the numbers sysfs gives, or 7:N.
func ensureLoopNode(n int) error {
	if n < 0 {
		return errors.New("not a loop device")
	}
	path := loopDev(n)
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	major, minor := uint32(loopMajor), uint32(n)
	if data, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/dev", n)); err == nil {
		if a, b, err := parseDevNumbers(string(data)); err == nil {
			major, minor = a, b
		}
	}
	log.Printf("%s is missing: making it (block %d:%d)", path, major, minor)
	err := unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(major, minor)))
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mknod %s: %w", path, err)
	}
	return nil
}

// attachLoop attaches `file` to a free loop device and returns the device's path.
func attachLoop(file string) (string, error) {
	backing, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer backing.Close()
	ctl, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer ctl.Close()
	var lastErr error
	for range attachTries {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("%s: LOOP_CTL_GET_FREE: %w", loopControl, err)
		}
		if err := ensureLoopNode(n); err != nil {
			return "", err
		}
		dev := loopDev(n)
		lastErr = setFd(dev, int(backing.Fd()), file)
		if errors.Is(lastErr, unix.EBUSY) {
			continue // another program took it between GET_FREE and SET_FD: ask again
		}
		if lastErr != nil {
			return "", lastErr
		}
		return dev, nil
	}
	return "", fmt.Errorf("no free loop device for %s after %d tries: %w", file, attachTries, lastErr)
}

// setFd binds the open `backing` file to `dev` and names it (what losetup -l shows as the
// back file when sysfs cannot say).
func setFd(dev string, backing int, name string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_FD, backing); err != nil {
		return fmt.Errorf("%s: LOOP_SET_FD: %w", dev, err)
	}
	var info unix.LoopInfo64
	copy(info.File_name[:unix.LO_NAME_SIZE-1], name)
	if err := unix.IoctlLoopSetStatus64(int(f.Fd()), &info); err != nil {
		// the name is for people; the device works without it
		log.Printf("%s: LOOP_SET_STATUS64 (the file's name): %v", dev, err)
	}
	return nil
}

// backingFile is what sysfs says `dev` is attached to ("" when it is not attached). The path
// is as the attaching process saw it; another mount namespace may see another path.
func backingFile(dev string) string {
	n := loopNumber(dev)
	if n < 0 {
		return ""
	}
	data, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)")
}

// loopBacks says whether `dev` is attached to `file`: sysfs names it, or (a path seen from
// another mount namespace, as when the plugin's container was restarted) the device's status
// gives the file's device and inode numbers.
func loopBacks(dev, file string) bool {
	named := backingFile(dev)
	if named == "" {
		return false
	}
	if named == file {
		return true
	}
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return false
	}
	if err := ensureLoopNode(loopNumber(dev)); err != nil {
		return false
	}
	f, err := os.Open(dev)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		return false
	}
	return info.Inode == st.Ino && info.Device == st.Dev
}

// loopsOf lists the loop devices attached to `file`.
func loopsOf(file string) []string {
	dirs, _ := filepath.Glob("/sys/block/loop*/loop")
	var out []string
	for _, d := range dirs {
		n := loopNumber(filepath.Base(filepath.Dir(d)))
		if n < 0 {
			continue
		}
		if dev := loopDev(n); loopBacks(dev, file) {
			out = append(out, dev)
		}
	}
	return out
}

// ensureLoop returns a loop device attached to `file`: `recorded` when it still is, another
// one that is, or a newly attached one.
func ensureLoop(file, recorded string) (string, error) {
	dev := recorded
	if dev == "" || !loopBacks(dev, file) {
		found := loopsOf(file)
		if len(found) == 0 {
			return attachLoop(file)
		}
		dev = found[0]
	}
	// sysfs knew it: the node may still be missing from this /dev
	if err := ensureLoopNode(loopNumber(dev)); err != nil {
		return "", err
	}
	return dev, nil
}

// detachLoops detaches every loop device attached to `file` (`recorded` first). A device
// still open elsewhere is detached by the kernel at its last close.
func detachLoops(file, recorded string) error {
	devs := loopsOf(file)
	for _, dev := range devs {
		if err := ensureLoopNode(loopNumber(dev)); err != nil {
			return err
		}
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("%s: LOOP_CLR_FD: %w", dev, err)
		}
	}
	if recorded != "" && len(devs) == 0 {
		log.Printf("%s: %s was no longer attached to it", file, recorded)
	}
	return nil
}

// syncLoop writes what is cached for `dev` to its file (before the file is copied).
func syncLoop(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// growLoop makes `dev` see its file's new size.
func growLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("%s: LOOP_SET_CAPACITY: %w", dev, err)
	}
	return nil
}

// blockDeviceSize is BLKGETSIZE64 of the block device at `path`.
func blockDeviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var size uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
	if errno != 0 {
		return 0, fmt.Errorf("%s: BLKGETSIZE64: %w", path, errno)
	}
	return int64(size), nil
}

// makeImage creates `file`, a sparse file of `size` bytes.
func makeImage(file string, size int64) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copySparse copies the file `src` to `dst` (created), keeping its holes: only the data
// extents are read (SEEK_DATA/SEEK_HOLE), and blocks of zeros in them are not written.
// It returns the copy's size.
func copySparse(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return 0, err
	}
	size := info.Size()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	err = copyExtents(in, out, size)
	if err == nil {
		err = out.Truncate(size)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return size, err
}

func copyExtents(in, out *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for off := int64(0); off < size; {
		start, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // holes to the end
		}
		end := size
		if err != nil { // no SEEK_DATA here: read it all
			start = off
		} else if e, err := unix.Seek(int(in.Fd()), start, unix.SEEK_HOLE); err == nil {
			end = e
		}
		for pos := start; pos < end; {
			chunk := buf[:min(int64(len(buf)), end-pos)]
			n, err := in.ReadAt(chunk, pos)
			if n > 0 && !bytes.Equal(chunk[:n], zero[:n]) {
				if _, werr := out.WriteAt(chunk[:n], pos); werr != nil {
					return werr
				}
			}
			pos += int64(n)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		off = end
	}
	return nil
}
