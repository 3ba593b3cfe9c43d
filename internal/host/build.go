package host

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/build"
	"github.com/airlockrun/airlock/internal/dockerfile"
)

// Image builds (`airlock template build`), as package build does them.
type (
	// BuildOptions is build.Options.
	BuildOptions = build.Options
	// BuildRequest is build.Request.
	BuildRequest = build.Request
	// BuildResult is build.Result.
	BuildResult = build.Result
	// BuildRunError is a RUN step that failed: its line, exit status and
	// the end of its output.
	BuildRunError = build.RunError
	// DockerfileError is a Dockerfile that cannot be built, at a line.
	DockerfileError = dockerfile.Error
)

// BuildCacheFile is the image builds' step cache, under Config.Home.
const BuildCacheFile = "build-cache.json"

// BuildImage builds req into the host's image store. What o leaves unset
// the host gives: its store, its native sandbox backend (never the warm
// pool: a step's sandbox is made for its own root) and the step cache
// Home/BuildCacheFile.
func (h *Host) BuildImage(ctx context.Context, o BuildOptions, req BuildRequest) (BuildResult, error) {
	if o.Store == nil {
		s, err := h.Images()
		if err != nil {
			return BuildResult{}, err
		}
		o.Store = s
	}
	if o.Backend == nil {
		if h.cfg.Sandboxes == nil {
			return BuildResult{}, errors.New("build: no sandbox backend in a read-only command")
		}
		b, err := h.cfg.Sandboxes.Backend()
		if err != nil {
			return BuildResult{}, err
		}
		o.Backend = b
	}
	if o.Cache == "" {
		o.Cache = filepath.Join(h.cfg.Home, BuildCacheFile)
	}
	return build.Build(ctx, o, req)
}
