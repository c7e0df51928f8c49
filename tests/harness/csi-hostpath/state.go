package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// volume is one provisioned (or inline ephemeral) volume: a directory under the data dir; with
// fsType tmpfs, a tmpfs of the volume's capacity mounted on that directory. A block volume
// (Block) is instead a sparse file of its capacity at that path, attached to LoopDevice.
type volume struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Capacity   int64             `json:"capacity"`
	FsType     string            `json:"fsType,omitempty"`
	Block      bool              `json:"block,omitempty"`
	LoopDevice string            `json:"loopDevice,omitempty"`
	Ephemeral  bool              `json:"ephemeral,omitempty"`
	Mutable    map[string]string `json:"mutable,omitempty"`
	// Lifecycle, for --check-volume-lifecycle: the node it is attached to, its staging path
	// and the targets it is published at.
	AttachedTo string          `json:"attachedTo,omitempty"`
	StagedAt   string          `json:"stagedAt,omitempty"`
	Published  map[string]bool `json:"published,omitempty"`
}

// snapshot is a copy of a volume's directory at one time; of a block volume (Block), a copy of
// its file.
type snapshot struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Source    string `json:"source"`
	Size      int64  `json:"size"`
	CreatedNs int64  `json:"createdNs"`
	Block     bool   `json:"block,omitempty"`
}

// store keeps the volumes and snapshots in <dataDir>/state.json, so a restarted plugin knows
// them; every change is written at once (temporary file, then rename).
type store struct {
	mu        sync.Mutex
	dir       string
	Volumes   map[string]*volume   `json:"volumes"`
	Snapshots map[string]*snapshot `json:"snapshots"`
}

func openStore(dir string) (*store, error) {
	s := &store{dir: dir, Volumes: map[string]*volume{}, Snapshots: map[string]*snapshot{}}
	for _, sub := range []string{"volumes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o750); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "state.json"), err)
	}
	if s.Volumes == nil {
		s.Volumes = map[string]*volume{}
	}
	if s.Snapshots == nil {
		s.Snapshots = map[string]*snapshot{}
	}
	return s, nil
}

// save writes the state; the caller holds mu.
func (s *store) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "state.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, "state.json"))
}

func (s *store) volumePath(id string) string   { return filepath.Join(s.dir, "volumes", id) }
func (s *store) snapshotPath(id string) string { return filepath.Join(s.dir, "snapshots", id) }

func (s *store) volumeByName(name string) *volume {
	for _, v := range s.Volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}

func (s *store) snapshotByName(name string) *snapshot {
	for _, sn := range s.Snapshots {
		if sn.Name == name {
			return sn
		}
	}
	return nil
}

// copyTree copies the directory tree `src` into `dst` (created), keeping modes, symlinks and
// ownership; it returns the bytes of regular files copied.
func copyTree(src, dst string) (int64, error) {
	var total int64
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			n, err := copyFile(path, target, info.Mode().Perm())
			if err != nil {
				return err
			}
			total += n
		default:
			return nil // devices, sockets, fifos: not copied
		}
		return keepOwner(target, info)
	})
	return total, err
}

func copyFile(src, dst string, mode fs.FileMode) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
