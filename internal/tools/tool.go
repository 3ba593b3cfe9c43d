package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// spec is a tool built from a param list and a function of its decoded
// arguments A.
type spec[A any] struct {
	name, desc string
	place      Place
	// effects is what a call may change. Every tool says: the zero value
	// is no answer, and Register refuses it.
	effects  effects
	params   []param
	validate func(*A) error // optional, after decoding
	run      func(ctx context.Context, env Env, a A) (Result, error)
}

func (t *spec[A]) Spec() model.ToolSpec {
	return model.ToolSpec{Name: t.name, Description: t.desc, Schema: schema(t.params)}
}

func (t *spec[A]) Place() Place { return t.place }

// effects is what a call of a tool may change.
type effects int

const (
	_ effects = iota
	// readOnly: nothing (it reads, lists, searches, or records a claim).
	readOnly
	// sandboxFiles: the files of the sandbox the call acts in.
	sandboxFiles
	// outside: the world outside the run's sandboxes.
	outside
)

func (t *spec[A]) Mutating() bool { return t.effects == sandboxFiles }
func (t *spec[A]) External() bool { return t.effects == outside }
func (t *spec[A]) declared() bool { return t.effects != 0 }

// decode decodes and validates args.
func (t *spec[A]) decode(args json.RawMessage) (A, error) {
	var a A
	if err := decodeArgs(t.name, t.params, args, &a); err != nil {
		return a, err
	}
	if t.validate != nil {
		if err := t.validate(&a); err != nil {
			return a, &ArgError{Tool: t.name, Msg: err.Error()}
		}
	}
	return a, nil
}

// check decodes args and reports only the error; the fuzz test uses it.
func (t *spec[A]) check(args json.RawMessage) error {
	_, err := t.decode(args)
	return err
}

func (t *spec[A]) Run(ctx context.Context, env Env, args json.RawMessage) (Result, error) {
	a, err := t.decode(args)
	if err != nil {
		return errResult("%v", err), nil
	}
	if t.place == PlaceSandbox {
		if env.Sandbox == nil {
			return errResult("%s: no sandbox", t.name), ErrNoSandbox
		}
		select {
		case <-env.Sandbox.Done():
			return errResult("%s: the sandbox is gone", t.name), ErrSandboxLost
		default:
		}
	}
	return t.run(ctx, env, a)
}

// Workspace is the sandbox directory relative paths resolve under.
const Workspace = "/workspace"

// resolve turns a model-given path into a clean absolute sandbox path.
func resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("path contains a NUL byte")
	}
	if !path.IsAbs(p) {
		p = path.Join(Workspace, p)
	}
	return path.Clean(p), nil
}

// fileFailure turns the error of a sandbox file operation into a tool error
// for the model when the operation itself failed inside the sandbox, and
// into a returned error when the sandbox could not be reached.
func fileFailure(ctx context.Context, env Env, tool string, err error) (Result, error) {
	var fe *sandbox.FileError
	if errors.As(err, &fe) {
		msg := fe.Msg
		if fe.Errno != "" && !strings.Contains(msg, fe.Errno) {
			msg += " (" + fe.Errno + ")"
		}
		return errResult("%s %s: %s", tool, fe.Path, msg), nil
	}
	return infraFailure(ctx, env, tool, err)
}

// infraFailure reports an error that is not the model's to handle.
func infraFailure(ctx context.Context, env Env, tool string, err error) (Result, error) {
	res := errResult("%s failed: %v", tool, err)
	if ctx.Err() != nil {
		return res, fmt.Errorf("tools: %s: %w", tool, ctx.Err())
	}
	select {
	case <-env.Sandbox.Done():
		return errResult("%s failed: the sandbox was lost", tool), fmt.Errorf("%w: %s: %w", ErrSandboxLost, tool, err)
	default:
	}
	return res, fmt.Errorf("tools: %s: %w", tool, err)
}

// CheckArgs decodes and validates args for t without running it; it returns
// an *ArgError for malformed arguments.
func CheckArgs(t Tool, args json.RawMessage) error {
	c, ok := t.(interface{ check(json.RawMessage) error })
	if !ok {
		return fmt.Errorf("tools: %s does not declare its arguments", t.Spec().Name)
	}
	return c.check(args)
}
