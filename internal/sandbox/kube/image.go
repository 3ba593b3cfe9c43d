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
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "airlock-exec", Mode: 0o555, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		return "", nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return "", nil, err
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	diff := sha256.Sum256(layer.Bytes())
	diffID := hex.EncodeToString(diff[:])
	name = repo + ":" + diffID[:12]
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/airlock-exec"}},
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
