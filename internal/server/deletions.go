package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// Deleter purges runs and deletes tenants with everything of theirs the
// host keeps, and records who did it (store.Deletion); host.Host is one.
// A run, a fork of it, or a tenant's run that has not ended gives an
// error matching store.ErrConflict, and nothing is deleted; DeleteTenant
// with force first refuses the tenant's keys and ends its runs and
// sandboxes (host.Host.DeleteTenant). An error with
// a record (ID > 0) means the deletion is done and recorded but some of
// what it freed (blobs, files) remains.
type Deleter interface {
	PurgeRun(ctx context.Context, id, actor string) (store.Deletion, error)
	DeleteTenant(ctx context.Context, tenant, actor string, force bool) (store.Deletion, error)
}

// storeDeleter is the deleter of a server whose Options name none: the
// store's deletions and the blobs they free, nothing beyond.
type storeDeleter struct {
	st store.Store
	bl *blob.Store
}

func (d storeDeleter) PurgeRun(ctx context.Context, id, actor string) (store.Deletion, error) {
	rec, free, err := d.st.PurgeRun(ctx, id, store.Deletion{Actor: actor})
	if err != nil {
		return rec, err
	}
	return rec, d.deleteBlobs(ctx, free)
}

// DeleteTenant with force only marks the tenant first (its keys are
// refused): with no engine to cancel its runs, one still going makes the
// store refuse.
func (d storeDeleter) DeleteTenant(ctx context.Context, tenant, actor string, force bool) (store.Deletion, error) {
	if force {
		if _, err := d.st.MarkTenantDeleting(ctx, tenant); err != nil {
			return store.Deletion{}, err
		}
	}
	rec, free, err := d.st.DeleteTenant(ctx, tenant, store.Deletion{Actor: actor})
	if err != nil {
		return rec, err
	}
	return rec, d.deleteBlobs(ctx, free)
}

func (d storeDeleter) deleteBlobs(ctx context.Context, digests []string) error {
	var errs []error
	for _, dg := range digests {
		if err := d.bl.Delete(ctx, dg); err != nil && !errors.Is(err, blob.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var errNoTenant = publicf(api.CodeNotFound, "no such tenant")

// DeletionOf is a deletion's audit record as the API shows it.
func DeletionOf(d store.Deletion) api.Deletion {
	counts := d.Counts
	if counts == nil {
		counts = map[string]int64{}
	}
	return api.Deletion{ID: d.ID, Tenant: d.Tenant, Kind: d.Kind, Target: d.Target, Actor: d.Actor, Counts: counts, Created: d.Created}
}

// actor names the caller in an audit record: its key's id and name. The
// record outlives the key (and, for a tenant's deletion, the tenant), so
// it says who the key was, not only its id.
func (s *Server) actor(ctx context.Context, c *call) string {
	who := "key " + c.p.KeyID
	keys, err := s.o.Store.ListAPIKeys(ctx, c.p.Tenant)
	if err != nil {
		c.log.Warn("deletion: cannot read the caller's key name", "err", err)
		return who
	}
	for _, k := range keys {
		if k.ID == c.p.KeyID && k.Name != "" {
			return who + " (" + clipText(k.Name, 64) + ")"
		}
	}
	return who
}

// deleted answers a deletion: its record, or the error. A deletion that
// is recorded but left some of what it freed (ID > 0 and an error) is
// done: the client gets the record, the log the rest.
func deleted(w http.ResponseWriter, c *call, rec store.Deletion, err error, conflict string) error {
	switch {
	case errors.Is(err, store.ErrConflict):
		return publicf(api.CodeConflict, "%s", conflict)
	case err != nil && rec.ID == 0:
		return err
	case err != nil:
		c.log.Warn("deletion: done, but some of what it freed remains", "deletion", rec.ID, "err", err)
	}
	writeJSON(w, http.StatusOK, DeletionOf(rec))
	return nil
}

// purgeRun deletes the caller's run {id} and every run forked from it,
// with their events, artifacts and blobs, and answers the audit record
// that stays. A run that has not ended, or has a fork that has not, is
// refused (cancel it first): its driver would write into a run that is
// gone.
func (s *Server) purgeRun(w http.ResponseWriter, r *http.Request, c *call) error {
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	if !run.Status.Final() {
		return publicf(api.CodeConflict, "the run is %s: a run is purged once it has ended; cancel it first", run.Status)
	}
	rec, err := s.deleter().PurgeRun(r.Context(), run.ID, s.actor(r.Context(), c))
	if errors.Is(err, store.ErrNotFound) {
		return errNoRun
	}
	return deleted(w, c, rec, err, "a run forked from this one has not ended: cancel it first")
}

// deleteTenant deletes the caller's own tenant {name} with everything it
// has (runs, keys, policies, templates, ledger, blobs; what else depends
// on the Deleter) and answers the audit record that stays. Any other
// name is not found: a key sees no tenant but its own. The caller's key
// goes with the tenant, and with it every UI session of the tenant.
// ?force=true cancels the tenant's runs and destroys its sandboxes
// first, its keys (the caller's too) refused from the start; without it a
// run that has not ended is a conflict.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request, c *call) error {
	name := r.PathValue("name")
	if name != c.p.Tenant {
		return errNoTenant
	}
	var force bool
	switch v := r.URL.Query().Get("force"); v {
	case "", "false":
	case "true":
		force = true
	default:
		return publicf(api.CodeBadRequest, "force=%s: want true or false", clipText(v, 16))
	}
	// The deletion outlives the request: a client that goes away half-way
	// must not leave the tenant marked and half stopped.
	ctx := context.WithoutCancel(r.Context())
	rec, err := s.deleter().DeleteTenant(ctx, name, s.actor(ctx, c), force)
	if errors.Is(err, store.ErrNotFound) {
		return errNoTenant
	}
	return deleted(w, c, rec, err, "a run of the tenant has not ended: cancel its runs first, or delete with force=true")
}

// listDeletions lists the audit records of the caller's tenant's
// deletions, newest first (?limit=N).
func (s *Server) listDeletions(w http.ResponseWriter, r *http.Request, c *call) error {
	n, err := parseParam(pageParam, r.URL.Query().Get("limit"))
	if err != nil {
		return err
	}
	recs, err := s.o.Store.ListDeletions(r.Context(), c.p.Tenant, int(n))
	if err != nil {
		return fmt.Errorf("list deletions: %w", err)
	}
	out := api.DeletionList{Deletions: make([]api.Deletion, 0, len(recs))}
	for _, d := range recs {
		out.Deletions = append(out.Deletions, DeletionOf(d))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleter() Deleter {
	if s.o.Deleter != nil {
		return s.o.Deleter
	}
	return storeDeleter{st: s.o.Store, bl: s.o.Blobs}
}
