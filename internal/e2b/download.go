package e2b

import (
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/klauspost/compress/flate"
)

// A download is gzipped only when the client accepts it and the file
// compresses: compressing what does not (media, archives, random bytes)
// costs the server's CPU and the client's and saves nothing, and on a
// fast link even text is cheaper sent as it is than squeezed hard. So
// the level is the fastest, and a file is judged by its type and by how
// a sample of its first bytes compresses.
const (
	// minGzip is the smallest download gzipped: below it the header and
	// the CPU outweigh the bytes saved.
	minGzip = 1 << 10
	// gzipSample is how many of a file's first bytes are compressed to
	// judge it.
	gzipSample = 32 << 10
	// gzipMinSaving is the share of the sample compression must save for
	// the file to be gzipped: 1/8.
	gzipMinSaving = 8
)

// compressedTypes are media types whose content is compressed already.
var compressedTypes = []string{
	"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/heic",
	"video/", "audio/mpeg", "audio/ogg", "audio/aac", "audio/mp4", "audio/webm", "audio/flac",
	"application/zip", "application/gzip", "application/x-gzip", "application/x-bzip2",
	"application/x-xz", "application/zstd", "application/x-7z-compressed", "application/vnd.rar",
	"application/x-rar-compressed", "application/java-archive", "font/woff", "font/woff2",
	"application/vnd.openxmlformats-officedocument.",
}

// compressedType reports whether name's extension or data's first bytes
// say the content is compressed already.
func compressedType(name string, data []byte) bool {
	types := []string{http.DetectContentType(data)}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		types = append(types, t)
	}
	for _, t := range types {
		for _, c := range compressedTypes {
			if strings.HasPrefix(t, c) {
				return true
			}
		}
	}
	return false
}

// worthGzip reports whether a download of name, of size bytes whose
// first are sample (up to gzipSample of them), is worth gzipping.
func worthGzip(name string, size int64, sample []byte) bool {
	if size < minGzip || compressedType(name, sample) {
		return false
	}
	sample = sample[:min(len(sample), gzipSample)]
	var n countWriter
	fw, err := flate.NewWriter(&n, flate.BestSpeed)
	if err != nil {
		return false
	}
	_, _ = fw.Write(sample)
	_ = fw.Close()
	return int(n) <= len(sample)-len(sample)/gzipMinSaving
}

// countWriter counts what is written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
