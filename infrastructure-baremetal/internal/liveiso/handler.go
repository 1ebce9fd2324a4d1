package liveiso

import (
	"net/http"
)

// Handler serves GET and HEAD PathPrefix + "<key>.iso" for Ready ISOs with http.ServeContent (Range
// and conditional requests, which iPXE's sanboot relies on) and 404 for anything else: a partial
// file, an ISO still being read or dropped, any other name. Files are opened through an os.Root, so
// no name reaches outside the cache directory.
func (c *Cache) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathPrefix+"{name}", c.serve)
	return mux
}

func (c *Cache) serve(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	k, ok := keyOf(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	c.mu.Lock()
	e := c.entries[k]
	ready := e != nil && e.phase == Ready
	var sum string
	if ready {
		sum = e.sha256
	}
	c.mu.Unlock()
	if !ready {
		http.NotFound(w, r)
		return
	}
	f, err := c.root.Open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		http.Error(w, "failed to read the ISO", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-iso9660-image")
	w.Header().Set("ETag", `"`+sum+`"`) // If-Range: a client resuming a read gets the same bytes or all of them
	http.ServeContent(w, r, name, fi.ModTime(), f)
}
