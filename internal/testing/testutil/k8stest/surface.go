package k8stest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// Readable returns, by "resource name", the JSON of every object in ns of every kind the API server lists
// there, as a user who may read everything but Secrets sees them: Secrets by their metadata alone. ConfigMaps,
// every object's labels and annotations, pod specs with their env, pod status with termination messages,
// events: all of it is in there.
func (c *Cluster) Readable(ctx context.Context, ns string) (map[string]string, error) {
	lists, err := c.cs.Discovery().ServerPreferredNamespacedResources()
	if err != nil {
		return nil, fmt.Errorf("discovering the namespaced kinds: %w", err)
	}
	out := map[string]string{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			prefix := "/apis/" + gv.String()
			if gv.Group == "" {
				prefix = "/api/" + gv.Version
			}
			raw, err := c.cs.Discovery().RESTClient().Get().AbsPath(prefix, "namespaces", ns, r.Name).DoRaw(ctx)
			if err != nil {
				return nil, fmt.Errorf("listing %s in %s: %w", r.Name, ns, err)
			}
			var list struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("reading the list of %s: %w", r.Name, err)
			}
			for _, item := range list.Items {
				var m struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
				}
				if err := json.Unmarshal(item, &m); err != nil {
					return nil, err
				}
				text := string(item)
				if gv.Group == "" && r.Name == "secrets" {
					meta, _ := json.Marshal(m.Metadata)
					text = string(meta)
				}
				out[r.Name+"."+gv.Group+" "+m.Metadata.Name] = text
			}
		}
	}
	return out, nil
}

// Recording keeps every version of the pods and events of one namespace that the API server showed while it
// ran: a pod's terminated state, with its termination message, lasts only until the pod is deleted.
type Recording struct {
	mu         sync.Mutex
	versions   map[string]string // "kind name resourceVersion" -> JSON
	messages   []string          // the termination messages seen
	terminated chan struct{}     // closed at the first termination message
}

// Record starts a Recording of ns, which ends with the test.
func (c *Cluster) Record(t *testing.T, ns string) *Recording {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recording{versions: map[string]string{}, terminated: make(chan struct{})}
	var wg sync.WaitGroup
	for kind, w := range map[string]func(context.Context, metav1.ListOptions) (watch.Interface, error){
		"Pod":   c.cs.CoreV1().Pods(ns).Watch,
		"Event": c.cs.CoreV1().Events(ns).Watch,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.follow(ctx, kind, w)
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// follow watches from the current state on, and again from the last version seen when the watch ends.
func (r *Recording) follow(ctx context.Context, kind string, start func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	rv := ""
	for ctx.Err() == nil {
		w, err := start(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			rv = ""
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // the API server is briefly unavailable: try again
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // too old a version: start again from the current state
				break
			}
			obj, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type != watch.Bookmark {
				r.add(kind, obj, ev.Object)
			}
		}
		w.Stop()
	}
}

func (r *Recording) add(kind string, meta metav1.Object, obj runtime.Object) {
	text, _ := json.Marshal(obj)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions[kind+" "+meta.GetName()+" "+meta.GetResourceVersion()] = string(text)
	if p, ok := obj.(*corev1.Pod); ok {
		for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			for _, term := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
				if term != nil && term.Message != "" {
					if len(r.messages) == 0 {
						close(r.terminated)
					}
					r.messages = append(r.messages, term.Message)
				}
			}
		}
	}
}

// Versions returns the JSON of every version recorded so far, by "kind name resourceVersion".
func (r *Recording) Versions() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.versions))
	for k, v := range r.versions {
		out[k] = v
	}
	return out
}

// Terminated is closed once a container's termination message has been recorded.
func (r *Recording) Terminated() <-chan struct{} { return r.terminated }

// TerminationMessages returns the containers' termination messages recorded so far.
func (r *Recording) TerminationMessages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.messages)
}

// PodIPs returns the addresses of the running pods in ns labelled label=value that are not being deleted.
func (c *Cluster) PodIPs(ctx context.Context, ns, label, value string) ([]string, error) {
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + value})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
	}
	return ips, nil
}

// SecretData returns the data of Secret ns/name, which a test needs to know what must not leak elsewhere.
func (c *Cluster) SecretData(ctx context.Context, ns, name string) (map[string][]byte, error) {
	s, err := c.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

// AddDNSName makes name resolve to addr for the cluster's pods until the test ends: scripts/k8s-env.sh's name
// server reads the hosts files in the dns-hosts folder beside the kubeconfig as they appear.
func AddDNSName(t *testing.T, kubeconfig, addr, name string) {
	t.Helper()
	dir := filepath.Join(filepath.Dir(kubeconfig), "dns-hosts")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the test cluster has no folder for names of its tests (%v): restart it with today's scripts/k8s-env.sh", err)
	}
	// Written aside and renamed in, so the name server never reads half a file; it skips dot files.
	file := filepath.Join(dir, name)
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, []byte(addr+" "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(file) })
}
