//go:build !linux

package file

import "os"

// statKeyOf has no ctime to go by here: every scan hashes every file, as it always did.
func statKeyOf(os.FileInfo) (statKey, bool) { return statKey{}, false }
