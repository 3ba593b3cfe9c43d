package kube

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// ExecutorArchive returns a one-layer image holding bin (airlock-exec) at
// /airlock-exec, as a docker-archive tarball (`docker load`, `ctr images
// import`, a registry push with a tool of the cluster's), tagged
// repo:<12 hex of its layer's digest>, and that name: what
// Config.ExecutorImage names. The image is the executor alone; it is
// never run but as the init container that copies it into the sandbox's
// pod.
func ExecutorArchive(bin []byte, repo string) (name string, archive []byte, err error) {
	return ImageArchive(repo, []string{"/airlock-exec"}, []ImageFile{{Name: "airlock-exec", Mode: 0o555, Data: bin}})
}

// ImageFile is a file, or a directory when Dir, of ImageArchive's layer.
type ImageFile struct {
	Name string // relative to the image's root
	Mode int64
	Data []byte
	Dir  bool
}

// ImageArchive returns a one-layer image of files whose entrypoint is
// entrypoint, as a docker-archive tarball tagged repo:<12 hex of its
// layer's digest>, and that name. No registry is needed: `ctr images
// import` takes it (the tests import airlock's own image so).
func ImageArchive(repo string, entrypoint []string, files []ImageFile) (name string, archive []byte, err error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg}
		if f.Dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return "", nil, err
		}
		if f.Dir {
			continue
		}
		if _, err := tw.Write(f.Data); err != nil {
			return "", nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	diff := sha256.Sum256(layer.Bytes())
	diffID := hex.EncodeToString(diff[:])
	name = repo + ":" + diffID[:12]
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + diffID}},
	})
	if err != nil {
		return "", nil, err
	}
	cfgSum := sha256.Sum256(config)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{name}, "Layers": []string{diffID + "/layer.tar"}}})
	if err != nil {
		return "", nil, err
	}
	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {cfgName, config}, {diffID + "/layer.tar", layer.Bytes()}} {
		if err := aw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return "", nil, err
		}
		if _, err := aw.Write(f.data); err != nil {
			return "", nil, err
		}
	}
	if err := aw.Close(); err != nil {
		return "", nil, err
	}
	return name, out.Bytes(), nil
}
