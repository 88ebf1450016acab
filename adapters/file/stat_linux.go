package file

import (
	"os"
	"syscall"
	"time"
)

// statKeyOf is what the kernel says of a file's identity and last change: inode, size, and the
// modification and status-change times (ctime moves on every write and cannot be set back, so a
// tool that restores mtime is still seen).
func statKeyOf(fi os.FileInfo) (statKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return statKey{}, false
	}
	return statKey{
		ino:   st.Ino,
		size:  st.Size,
		mtime: time.Unix(st.Mtim.Unix()),
		ctime: time.Unix(st.Ctim.Unix()),
	}, true
}
