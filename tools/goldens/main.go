// Command goldens answers the golden inputs of tests/unit/model/golden/ with what Calico's own
// code makes of them.  It is built by tools/gen_goldens.py against a Calico checkout given by
// path, reads one JSON document of inputs on stdin and writes one of answers on stdout, in the
// same order:
//
//	calico_v3          the object read as the KDD custom-resource client (a fake API server
//	                   answers its List) or the etcd backend (model.ParseValue) reads it, the
//	                   syncer's update processor, then syncproto.SerializeUpdate
//	validation         whether Typha's ValidationFilter keeps the value ParseValue decodes
//	etcd_ipam          the list options' KeyFromDefaultPath, ParseValue, SerializeUpdate
//	kdd_optional_apis  the KDD client's List (ClusterNetworkPolicy or LiveMigration), the
//	                   felix syncer's processor for the kind, SerializeUpdate
//
// Which processor serves a kind is read from the syncer Calico builds (felixsyncer.New and the
// others, called as Typha's daemon calls them), so a Calico release that changes its syncers
// changes the answers without a change here.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"github.com/sirupsen/logrus"

	"github.com/projectcalico/calico/libcalico-go/lib/apiconfig"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/api"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/k8s"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/model"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/syncersv1/bgpsyncer"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/syncersv1/felixsyncer"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/syncersv1/nodestatussyncer"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/syncersv1/tunnelipsyncer"
	"github.com/projectcalico/calico/libcalico-go/lib/backend/watchersyncer"
	cnet "github.com/projectcalico/calico/libcalico-go/lib/net"
	"github.com/projectcalico/calico/typha/pkg/calc"
	"github.com/projectcalico/calico/typha/pkg/syncproto"
)

type conversionCase struct {
	Syncer     string          `json:"syncer"`
	Mode       string          `json:"mode"`
	Group      string          `json:"group"`
	UsePodCIDR bool            `json:"use_pod_cidr"`
	Obj        json.RawMessage `json:"obj"`
}

type validationCase struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type etcdCase struct {
	Kind   string `json:"kind"`
	Path   string `json:"path"`
	Stored string `json:"stored"`
}

type optionalCase struct {
	Obj json.RawMessage `json:"obj"`
}

type inputs struct {
	CalicoV3        []conversionCase `json:"calico_v3"`
	Validation      []validationCase `json:"validation"`
	EtcdIPAM        []etcdCase       `json:"etcd_ipam"`
	KDDOptionalAPIs []optionalCase   `json:"kdd_optional_apis"`
}

// sent is one update as Typha sends it: key, value, V3ResourceVersion.
type sent [3]string

type etcdAnswer struct {
	Key   *string `json:"key"`
	Value *string `json:"value"`
}

type answers struct {
	CalicoV3        [][]sent     `json:"calico_v3"`
	Validation      []bool       `json:"validation"`
	EtcdIPAM        []etcdAnswer `json:"etcd_ipam"`
	KDDOptionalAPIs [][]sent     `json:"kdd_optional_apis"`
}

// object is the little of a Kubernetes object the program routes by.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		CIDR string `json:"cidr"`
	} `json:"spec"`
}

// apiServer answers every request with the list holding the current object, which is what
// a List of the object's kind sees when the cluster holds only that object.
type apiServer struct {
	mu   sync.Mutex
	body []byte
	srv  *httptest.Server
}

func newAPIServer() *apiServer {
	a := &apiServer{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(a.body)
	}))
	return a
}

func (a *apiServer) serve(apiVersion, kind string, obj []byte) {
	list := map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind + "List",
		"metadata":   map[string]any{"resourceVersion": "1"},
		"items":      []json.RawMessage{obj},
	}
	body, err := json.Marshal(list)
	check(err)
	a.mu.Lock()
	a.body = body
	a.mu.Unlock()
}

func (a *apiServer) client(calicoGroup string) api.Client {
	spec := apiconfig.CalicoAPIConfigSpec{DatastoreType: apiconfig.Kubernetes}
	spec.K8sAPIEndpoint = a.srv.URL
	spec.CalicoAPIGroup = calicoGroup
	c, err := k8s.NewKubeClient(&spec)
	check(err)
	return c
}

// resourceTypes returns the resource types Calico's syncer of that name watches, as Typha's
// daemon builds it.  watchersyncer keeps them unexported, so they are read by reflection.
func resourceTypes(syncer string, spec apiconfig.CalicoAPIConfigSpec) []watchersyncer.ResourceType {
	var s api.Syncer
	switch syncer {
	case "felix":
		s = felixsyncer.New(nil, spec, nil, true)
	case "bgp":
		s = bgpsyncer.New(nil, nil, "", spec)
	case "tunnel-ip-allocation":
		s = tunnelipsyncer.New(nil, nil, "")
	case "node-status":
		s = nodestatussyncer.New(nil, nil)
	default:
		check(fmt.Errorf("unknown syncer %q", syncer))
	}
	caches := reflect.ValueOf(s).Elem().FieldByName("watcherCaches")
	var out []watchersyncer.ResourceType
	for i := range caches.Len() {
		field := caches.Index(i).Elem().FieldByName("resourceType")
		rt := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem()
		out = append(out, rt.Interface().(watchersyncer.ResourceType))
	}
	return out
}

// resourceType is the syncer's entry that lists the object's kind.
func resourceType(types []watchersyncer.ResourceType, kind string) watchersyncer.ResourceType {
	for _, rt := range types {
		switch l := rt.ListInterface.(type) {
		case model.ResourceListOptions:
			if l.Kind == kind {
				return rt
			}
		case model.BlockListOptions:
			if kind == "IPAMBlock" {
				return rt
			}
		}
	}
	check(fmt.Errorf("no resource type lists %s", kind))
	panic("unreachable")
}

// process runs the update processor (if any) as the watcher cache does and serializes every
// non-deletion it yields; a processor error still sends what came before it.
func process(rt watchersyncer.ResourceType, kvps []*model.KVPair) []sent {
	out := []sent{}
	if rt.UpdateProcessor != nil {
		rt.UpdateProcessor.OnSyncerStarting()
	}
	for _, kvp := range kvps {
		converted := []*model.KVPair{kvp}
		if rt.UpdateProcessor != nil {
			converted, _ = rt.UpdateProcessor.Process(kvp)
		}
		for _, c := range converted {
			if c == nil || c.Value == nil {
				continue
			}
			su, err := syncproto.SerializeUpdate(api.Update{KVPair: *c, UpdateType: api.UpdateTypeKVNew})
			check(err)
			if su.Value == nil {
				continue
			}
			out = append(out, sent{su.Key, string(su.Value), su.V3ResourceVersion})
		}
	}
	return out
}

func list(c api.Client, li model.ListInterface) []*model.KVPair {
	// An object the client cannot convert is skipped inside List; an error here is the
	// fake API server's or the program's, and would make every answer an empty one.
	l, err := c.List(context.Background(), li, "")
	check(err)
	return l.KVPairs
}

// withAPIVersion is obj with another apiVersion; the other fields keep their bytes (a
// managedFields entry's fieldsV1 is kept verbatim, so its key order reaches the output).
func withAPIVersion(obj json.RawMessage, apiVersion string) json.RawMessage {
	var m map[string]json.RawMessage
	check(json.Unmarshal(obj, &m))
	v, err := json.Marshal(apiVersion)
	check(err)
	m["apiVersion"] = v
	out, err := json.Marshal(m)
	check(err)
	return out
}

func conversion(servers map[string]*apiServer, clients map[string]api.Client, c conversionCase) []sent {
	var o object
	check(json.Unmarshal(c.Obj, &o))
	spec := apiconfig.CalicoAPIConfigSpec{}
	spec.K8sUsePodCIDR = c.UsePodCIDR
	switch c.Mode {
	case "kdd":
		spec.DatastoreType = apiconfig.Kubernetes
	case "etcd":
		spec.DatastoreType = apiconfig.EtcdV3
	default:
		check(fmt.Errorf("unknown datastore mode %q", c.Mode))
	}
	rt := resourceType(resourceTypes(c.Syncer, spec), o.Kind)
	if c.Mode == "kdd" {
		apiVersion, group := "projectcalico.org/v3", "projectcalico.org/v3"
		obj := c.Obj
		if c.Group == "crd.projectcalico.org" {
			apiVersion, group = "crd.projectcalico.org/v1", "crd.projectcalico.org/v1"
			obj = withAPIVersion(obj, apiVersion)
		}
		servers[group].serve(apiVersion, o.Kind, obj)
		return process(rt, list(clients[group], rt.ListInterface))
	}
	// etcd: the value stored at the resource's key, decoded as the backend's List does.
	var key model.Key = model.ResourceKey{Kind: o.Kind, Name: o.Metadata.Name, Namespace: o.Metadata.Namespace}
	stored := []byte(c.Obj)
	if _, isBlock := rt.ListInterface.(model.BlockListOptions); isBlock {
		// IPAM blocks are stored in etcd as the v1 model, the v3 object's spec.
		_, cidr, err := cnet.ParseCIDR(o.Spec.CIDR)
		check(err)
		key = model.BlockKey{CIDR: *cidr}
		var full struct {
			Spec json.RawMessage `json:"spec"`
		}
		check(json.Unmarshal(c.Obj, &full))
		stored = full.Spec
	}
	value, err := model.ParseValue(key, stored)
	if err != nil {
		return []sent{}
	}
	return process(rt, []*model.KVPair{{Key: key, Value: value}})
}

type capture struct{ updates []api.Update }

func (c *capture) OnStatusUpdated(api.SyncStatus) {}
func (c *capture) OnUpdates(updates []api.Update) { c.updates = append(c.updates, updates...) }

func validation(c validationCase) bool {
	key := model.KeyFromDefaultPath(c.Key)
	if key == nil {
		key = resourceKeyAt(c.Key)
	}
	value, err := model.ParseValue(key, []byte(c.Value))
	check(err)
	sink := &capture{}
	calc.NewValidationFilter(sink).OnUpdates([]api.Update{{
		KVPair: model.KVPair{Key: key, Value: value}, UpdateType: api.UpdateTypeKVNew}})
	return sink.updates[0].Value != nil
}

// resourceKeyAt finds the v3 resource key whose path is path, for the paths
// KeyFromDefaultPath does not parse (a name holding "/"): the key of one of the kinds the
// syncers watch that serializes to exactly that path.
func resourceKeyAt(path string) model.Key {
	const prefix = "/calico/resources/v3/projectcalico.org/"
	rest := strings.SplitN(strings.TrimPrefix(path, prefix), "/", 2)
	if !strings.HasPrefix(path, prefix) || len(rest) != 2 {
		check(fmt.Errorf("validation key %q does not parse", path))
	}
	ns, name, _ := strings.Cut(rest[1], "/")
	for _, kind := range watchedKinds() {
		for _, k := range []model.ResourceKey{{Kind: kind, Name: rest[1]},
			{Kind: kind, Namespace: ns, Name: name}} {
			if p, err := model.KeyToDefaultPath(k); err == nil && p == path {
				return k
			}
		}
	}
	check(fmt.Errorf("validation key %q names no watched kind", path))
	return nil
}

// watchedKinds lists every v3 kind some syncer watches, in either datastore mode.
func watchedKinds() []string {
	var kinds []string
	for _, syncer := range []string{"felix", "bgp", "tunnel-ip-allocation", "node-status"} {
		for _, ds := range []apiconfig.DatastoreType{apiconfig.Kubernetes, apiconfig.EtcdV3} {
			for _, rt := range resourceTypes(syncer, apiconfig.CalicoAPIConfigSpec{DatastoreType: ds}) {
				if l, ok := rt.ListInterface.(model.ResourceListOptions); ok {
					kinds = append(kinds, l.Kind)
				}
			}
		}
	}
	return kinds
}

func etcdIPAM(c etcdCase) etcdAnswer {
	var li model.ListInterface
	switch c.Kind {
	case "IPAMBlock":
		li = model.BlockListOptions{}
	case "BlockAffinity":
		li = model.BlockAffinityListOptions{}
	default:
		check(fmt.Errorf("unknown IPAM kind %q", c.Kind))
	}
	key := li.KeyFromDefaultPath(c.Path)
	if key == nil {
		return etcdAnswer{}
	}
	value, err := model.ParseValue(key, []byte(c.Stored))
	if err != nil {
		return etcdAnswer{}
	}
	su, err := syncproto.SerializeUpdate(api.Update{KVPair: model.KVPair{Key: key, Value: value},
		UpdateType: api.UpdateTypeKVNew})
	check(err)
	k, v := su.Key, string(su.Value)
	return etcdAnswer{Key: &k, Value: &v}
}

func optional(srv *apiServer, c api.Client, oc optionalCase) []sent {
	var o object
	check(json.Unmarshal(oc.Obj, &o))
	kinds := map[string]string{
		"ClusterNetworkPolicy":            model.KindKubernetesClusterNetworkPolicy,
		"VirtualMachineInstanceMigration": "LiveMigration",
	}
	kind, ok := kinds[o.Kind]
	if !ok {
		check(fmt.Errorf("unknown optional API kind %q", o.Kind))
	}
	spec := apiconfig.CalicoAPIConfigSpec{DatastoreType: apiconfig.Kubernetes}
	rt := resourceType(resourceTypes("felix", spec), kind)
	srv.serve(o.APIVersion, o.Kind, oc.Obj)
	return process(rt, list(c, rt.ListInterface))
}

func main() {
	logrus.SetLevel(logrus.FatalLevel)
	raw, err := io.ReadAll(os.Stdin)
	check(err)
	var in inputs
	check(json.Unmarshal(raw, &in))

	servers := map[string]*apiServer{}
	clients := map[string]api.Client{}
	for _, group := range []string{"projectcalico.org/v3", "crd.projectcalico.org/v1"} {
		servers[group] = newAPIServer()
		clients[group] = servers[group].client(group)
	}
	out := answers{CalicoV3: [][]sent{}, Validation: []bool{}, EtcdIPAM: []etcdAnswer{},
		KDDOptionalAPIs: [][]sent{}}
	for _, c := range in.CalicoV3 {
		out.CalicoV3 = append(out.CalicoV3, conversion(servers, clients, c))
	}
	for _, c := range in.Validation {
		out.Validation = append(out.Validation, validation(c))
	}
	for _, c := range in.EtcdIPAM {
		out.EtcdIPAM = append(out.EtcdIPAM, etcdIPAM(c))
	}
	for _, c := range in.KDDOptionalAPIs {
		out.KDDOptionalAPIs = append(out.KDDOptionalAPIs,
			optional(servers["projectcalico.org/v3"], clients["projectcalico.org/v3"], c))
	}
	enc := json.NewEncoder(os.Stdout)
	check(enc.Encode(out))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "goldens:", err)
		os.Exit(1)
	}
}
