package file

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
)

// fingerprint identifies a file's content without keeping it: its size
// and xxhash. The modification time is deliberately not part of it: a
// file rewritten with the same content (a ConfigMap swap, a
// configuration-management run, touch) need not be parsed again, and a
// change within the same mtime tick is still caught by the hash.
type fingerprint struct {
	size int64
	hash uint64
}

func fingerprintOf(data []byte) fingerprint {
	return fingerprint{size: int64(len(data)), hash: xxhash.Sum64(data)}
}

// statKey is a file's stat as statKeyOf takes it. A file whose statKey is what it was when its
// content was last fingerprinted is not read again: hashing every file of a large registry on
// every scan was most of the CPU a one-file change cost (docs/benchmarks.md, "End to end:
// galleon-file under the load tool").
type statKey struct {
	ino          uint64
	size         int64
	mtime, ctime time.Time
}

// racyStat is how long after a file's last change its stat is trusted. File times tick with the
// kernel's coarse clock, so a second write of the same size inside one tick leaves the stat as it
// was; a file changed this recently when its stat was taken is fingerprinted again next scan (the
// rule git uses for its index's "racily clean" entries).
const racyStat = time.Second

// trusted says whether st, taken at statAt, may stand for the content fingerprinted then, when
// times within racy of statAt are not trusted.
func (st statKey) trusted(statAt time.Time, racy time.Duration) bool {
	return !st.mtime.IsZero() && st.mtime.Before(statAt.Add(-racy)) && st.ctime.Before(statAt.Add(-racy))
}

// sync re-scans the directory and reports what changed.
func (s *runState) sync() {
	if err := s.scan(); err != nil {
		if s.unreachable == nil {
			s.log.Debug("registry directory unreachable; keeping the last state", "err", err)
			s.report.Unreachable(err)
		}
		s.unreachable = err
		return
	}
	// reportFiles would find no difference: skip building the merged state.
	if s.changed || !s.synced || s.unreachable != nil || s.forceRemovals {
		s.reportFiles()
	}
}

// scan makes sure the directory is watched and reads every registry file
// whose content changed. It returns an error only if the directory itself
// cannot be read.
func (s *runState) scan() error {
	dir := s.cfg.Dir
	if err := s.ensureWatch(); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cannot read registry directory %s: %w", dir, err)
	}

	seen := map[string]bool{}
	// Files are parsed as they are read, and kept in listing order once all are parsed.
	pool := parsePool{namespace: s.cfg.Namespace}
	defer pool.wait() // the panics of a bug aside, parseAndKeep has waited already
	var toParse []*fileParse
	toParseBytes := 0
	for _, e := range entries {
		name := e.Name()
		if !isRegistryFile(name) {
			continue
		}
		f, present := s.scanFile(name)
		if present {
			seen[name] = true
		}
		if f == nil {
			continue
		}
		pool.add(f)
		toParse = append(toParse, f)
		if toParseBytes += len(f.data); toParseBytes >= parseBatchBytes {
			s.parseAndKeep(&pool, toParse)
			toParse, toParseBytes = toParse[:0], 0
		}
	}
	s.parseAndKeep(&pool, toParse)
	s.dropUnseen(seen)
	return nil
}

// scanFile looks at one registry file of the listing. It returns the file
// to parse if its content changed (nil otherwise), and whether the file is
// still there. An unreadable file keeps its last good content.
func (s *runState) scanFile(name string) (f *fileParse, present bool) {
	path := filepath.Join(s.cfg.Dir, name)
	// Stat, not e.Type(): ConfigMap volumes hold symlinks to files.
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false // removed since the listing, or a dangling link
	}
	if err == nil && fi.IsDir() {
		return nil, false
	}
	fs := s.files[name]
	if fs == nil {
		fs = &fileState{}
		s.files[name] = fs
		s.changed = true
	}
	// A file parsed before is not read while its stat is what it was
	// when its content was fingerprinted; otherwise it is hashed, through
	// a small buffer, and read whole only if its content changed.
	var data []byte
	var st statKey
	statOK, statAt := false, time.Now()
	if err == nil {
		st, statOK = statKeyOf(fi)
	}
	if err == nil && fs.parsed {
		var same bool
		if same, err = s.sameContent(path, fs, st, statAt, statOK); same {
			return nil, true
		}
	}
	if err == nil {
		data, err = s.readFile(path)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	s.changed = true
	if err != nil {
		// Unreadable (permissions): like a malformed file, keep what it
		// said last, and read it again next time.
		fs.parsed = false
		fs.fileErr = &rejection{path: path, err: fmt.Errorf("cannot read file: %w", err)}
		s.keepLastGood(name, fs)
		return nil, true
	}
	fs.parsed, fs.fp = true, fingerprintOf(data)
	fs.stat, fs.statAt, fs.statOK = st, statAt, statOK
	return &fileParse{name: name, path: path, data: data, fs: fs}, true
}

// sameContent says whether a file parsed before still has the content
// parsed: its stat (st, taken at statAt; statOK if usable) is the trusted
// one of then, or its fingerprint is the same (and the new stat is kept).
func (s *runState) sameContent(path string, fs *fileState, st statKey, statAt time.Time, statOK bool) (bool, error) {
	if statOK && fs.statOK && st == fs.stat && fs.stat.trusted(fs.statAt, s.statRacy) {
		return true, nil
	}
	fp, err := s.fingerprintFile(path)
	if err != nil || fp != fs.fp {
		return false, err
	}
	fs.stat, fs.statAt, fs.statOK = st, statAt, statOK
	return true, nil
}

// dropUnseen forgets the files the listing no longer holds.
func (s *runState) dropUnseen(seen map[string]bool) {
	for name, fs := range s.files {
		if !seen[name] {
			s.setGood(name, fs, nil)
			delete(s.files, name)
			s.changed = true
		}
	}
}

// fileParse is one changed file of a scan: its content in, the parse out.
type fileParse struct {
	name, path string
	data       []byte
	fs         *fileState
	parsed     *parsedFile
	rej        *rejection
}

// parseBatchBytes bounds the file content a scan holds at once while its
// files are parsed in parallel.
const parseBatchBytes = 32 << 20

// parseAndKeep waits for the files added to pool to be parsed, then keeps each one's
// services, or its last good ones if it is malformed, in listing order.
func (s *runState) parseAndKeep(pool *parsePool, files []*fileParse) {
	pool.wait()
	for _, f := range files {
		if f.rej != nil {
			f.fs.fileErr = f.rej
			s.keepLastGood(f.name, f.fs)
		} else {
			f.fs.fileErr = nil
			var good []parsedService
			good, f.fs.rejected = carryForward(f.fs.good, f.parsed)
			s.setGood(f.name, f.fs, good)
			s.persist(f.name, f.data)
		}
		*f = fileParse{} // the content and parse are kept in fs now, or dropped
	}
}

// parsePool parses files on up to GOMAXPROCS goroutines while the scan reads the next ones:
// reading the load tool's registry took a start's single goroutine a while, with a core free
// meanwhile (docs/benchmarks.md, "galleon-file start", BenchmarkParseGenerated -cpu 1,2). The
// files are independent; parsing is most of a start's adapter work.
// Its goroutines start with the first file added (a scan that finds nothing changed starts
// none) and are gone when wait returns. A pool belongs to one goroutine.
type parsePool struct {
	namespace string
	files     chan *fileParse // nil: no goroutine running
	wg        sync.WaitGroup
}

func (p *parsePool) add(f *fileParse) {
	if p.files == nil {
		p.files = make(chan *fileParse, parsePoolQueue)
		for range runtime.GOMAXPROCS(0) {
			p.wg.Go(func() {
				var arena nodeArena // one per goroutine, for every file it parses
				for f := range p.files {
					f.parsed, f.rej = parseFileIn(&arena, f.path, f.data, p.namespace)
				}
			})
		}
	}
	p.files <- f
}

// wait returns once every file added is parsed and the goroutines have stopped.
func (p *parsePool) wait() {
	if p.files != nil {
		close(p.files)
		p.wg.Wait()
		p.files = nil
	}
}

// parsePoolQueue is how many files read may wait for a parsing goroutine: the scan reads
// ahead that far (parseBatchBytes bounds their bytes).
const parsePoolQueue = 64

// openFile opens a registry file for reading if it is a regular file of at
// most Config.MaxFileSize bytes. A named pipe, a device or a socket is
// refused without blocking: O_NONBLOCK makes opening a FIFO return at once
// (a plain open waits for a writer, and the watcher with it), and the
// check is made on the open file, so a file swapped between the listing
// and the open is caught too.
func (s *runState) openFile(path string) (*os.File, error) {
	s.opened++
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("not a regular file (%v): only regular files, or links to them, are read", fi.Mode().Type())
	}
	if fi.Size() > s.cfg.MaxFileSize {
		f.Close()
		return nil, s.tooLarge(fi.Size())
	}
	return f, nil
}

func (s *runState) tooLarge(size int64) error {
	return fmt.Errorf("file is %d bytes or more, over the limit of %d (--%s)", size, s.cfg.MaxFileSize, flagMaxSize)
}

// readFile reads a registry file whole, never more than
// Config.MaxFileSize bytes even if it grows while being read.
func (s *runState) readFile(path string) ([]byte, error) {
	f, err := s.openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Sized from the file (openFile checked it is at most MaxFileSize): one
	// read instead of io.ReadAll's doubling from 512 bytes, which cost a
	// start measurable time on large files (docs/benchmarks.md, "galleon-file
	// start"). A file that grew meanwhile still reads whole.
	var buf bytes.Buffer
	if fi, err := f.Stat(); err == nil {
		buf.Grow(int(min(fi.Size(), s.cfg.MaxFileSize)) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(io.LimitReader(f, s.cfg.MaxFileSize+1)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if int64(len(data)) > s.cfg.MaxFileSize {
		return nil, s.tooLarge(int64(len(data)))
	}
	return data, nil
}

// fingerprintFile returns the fingerprint of the file at path, reading it
// through s.buf so that an unchanged file costs no allocation.
func (s *runState) fingerprintFile(path string) (fingerprint, error) {
	f, err := s.openFile(path)
	if err != nil {
		return fingerprint{}, err
	}
	defer f.Close()
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	d := xxhash.New()
	var size int64
	for {
		n, err := f.Read(s.buf)
		size += int64(n)
		if size > s.cfg.MaxFileSize {
			return fingerprint{}, s.tooLarge(size)
		}
		_, _ = d.Write(s.buf[:n]) // never fails
		if errors.Is(err, io.EOF) {
			return fingerprint{size: size, hash: d.Sum64()}, nil
		}
		if err != nil {
			return fingerprint{}, err
		}
	}
}
