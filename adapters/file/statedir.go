package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// keepLastGood completes a bad file's rejection with what is served
// instead: the content it had in this run, or, after a restart, the last
// good content kept in Config.StateDir.
func (s *runState) keepLastGood(name string, fs *fileState) {
	if fs.good == nil && s.persisted[name] {
		path := filepath.Join(s.cfg.StateDir, name)
		if data, err := os.ReadFile(path); err == nil {
			if parsed, rej := parseFile(filepath.Join(s.cfg.Dir, name), data, s.cfg.Namespace); rej == nil {
				good, _ := carryForward(nil, parsed)
				s.setGood(name, fs, good)
				fs.fileErr.err = fmt.Errorf("%w (its last good content, kept in %s, is served)", fs.fileErr.err, s.cfg.StateDir)
				return
			}
		}
	}
	if fs.good != nil {
		fs.fileErr.err = fmt.Errorf("%w (the file's last good content is still served)", fs.fileErr.err)
	}
}

// loadPersisted lists the files whose last good content Config.StateDir
// holds.
func (s *runState) loadPersisted() {
	s.persisted = map[string]bool{}
	if s.cfg.StateDir == "" {
		return
	}
	entries, err := os.ReadDir(s.cfg.StateDir)
	if err != nil {
		s.log.Warn("cannot read the state directory; last good contents are kept in memory only", "state_dir", s.cfg.StateDir, "err", err)
		return
	}
	for _, e := range entries {
		if isRegistryFile(e.Name()) && e.Type().IsRegular() {
			s.persisted[e.Name()] = true
		}
	}
}

// persist keeps a file's good content in Config.StateDir, written to a
// temporary file and renamed, so a crash leaves the old copy or the new.
func (s *runState) persist(name string, data []byte) {
	if s.cfg.StateDir == "" {
		return
	}
	path := filepath.Join(s.cfg.StateDir, name)
	tmp := filepath.Join(s.cfg.StateDir, ".tmp-"+name)
	err := os.WriteFile(tmp, data, 0o600)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		s.log.Warn("cannot keep a file's last good content in the state directory", "file", name, "state_dir", s.cfg.StateDir, "err", err)
		return
	}
	s.persisted[name] = true
}

// forgetRemoved drops the persisted copies of files no longer in the
// directory, once their removal has been reported.
func (s *runState) forgetRemoved() {
	for name := range s.persisted {
		if _, ok := s.files[name]; !ok {
			if err := os.Remove(filepath.Join(s.cfg.StateDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("cannot remove a file's copy from the state directory", "file", name, "err", err)
				continue
			}
			delete(s.persisted, name)
		}
	}
}
