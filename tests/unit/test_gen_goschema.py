"""tools/gen_goschema.py reads Go type declarations the way encoding/json lays them out.

The Go packages here are small ones written for the test, placed where the generator looks
for Calico's and Kubernetes' packages; running it on a real Calico checkout is the
maintainer's step (tools/README.md), and test_generated.py checks its committed output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.gen_goschema import (
    API_MODULE,
    APIMACHINERY,
    CALICO_MODULE,
    K8S_API,
    GoSourceError,
    Named,
    Schema,
    tag_get,
    tokenize,
)

META = '''package v1

import "time"

type TypeMeta struct {
	Kind string `json:"kind,omitempty" protobuf:"bytes,1,opt,name=kind"`
	APIVersion string `json:"apiVersion,omitempty"`
}

type ObjectMeta struct {
	Name string `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

type Duration struct {
	time.Duration `protobuf:"varint,1,opt,name=duration,casttype=time.Duration"`
}

func (d Duration) MarshalJSON() ([]byte, error) { return nil, nil }
'''

WIDGET = '''// Package v3 is a stand-in for Calico's API package.
package v3

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"github.com/projectcalico/api/pkg/lib/numorstring"
)

type Mode string

const ModeOn Mode = "On" // not a type

type (
	Widget struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata" protobuf:"bytes,1,opt,name=metadata"`
		Spec WidgetSpec `json:"spec"`
	}

	WidgetSpec struct {
		/* block comment
			over lines */
		Low, High int32 `validate:"omitempty,gte=0"`
		Mode     *Mode `json:"mode,omitempty" confignamev1:"WidgetMode"`
		Ports    []numorstring.Port `json:"ports" validate:"omitempty"`
		Every    *metav1.Duration `json:"every,omitempty" configv1timescale:"seconds"`
		Parts    map[string]*Part `json:"parts,omitzero"`
		Hidden   string `json:"-"`
		Dash     string `json:"-,"`
		internal string
		Plain    uint16
		Callback func(int) error `json:"-"`
	}
)

type Part struct {
	Weight float64 `json:"weight"`
	Next   *Part   `json:"next,omitempty"`
}

type Odd struct {
	Value Marshaled `json:"value"`
}

type Marshaled struct{ X int }

func (m *Marshaled) MarshalJSON() ([]byte, error) {
	return []byte(`{"x":1}`), nil
}
'''

PORT = '''package numorstring

type Port struct {
	MinPort  uint16 `json:"minPort,omitempty"`
	PortName string `json:"portName" validate:"omitempty,portName"`
}

func (p Port) MarshalJSON() ([]byte, error) { return nil, nil }
'''


@pytest.fixture
def schema(tmp_path: Path) -> Schema:
    for rel, text in (("calico/api/pkg/apis/projectcalico/v3/widget.go", WIDGET),
                      ("calico/api/pkg/lib/numorstring/port.go", PORT),
                      ("apimachinery/pkg/apis/meta/v1/types.go", META)):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    (tmp_path / "api").mkdir()
    return Schema({CALICO_MODULE: tmp_path / "calico", API_MODULE: tmp_path / "calico" / "api",
                   K8S_API: tmp_path / "api", APIMACHINERY: tmp_path / "apimachinery"})


def _widget(schema: Schema) -> None:
    schema.layout("v3.Widget", Named(f"{API_MODULE}/pkg/apis/projectcalico/v3", "Widget"))


def test_layouts_follow_encoding_json(schema: Schema) -> None:
    _widget(schema)
    assert schema.layouts["v3.Widget"].fields == (
        ("kind", "S", True), ("apiVersion", "S", True),
        ("metadata", "T['meta.ObjectMeta']", False), ("spec", "T['v3.WidgetSpec']", False))
    assert schema.layouts["v3.WidgetSpec"].fields == (
        ("Low", "I", False), ("High", "I", False), ("mode", "P(S)", True),
        ("ports", "L(PORT)", False), ("every", "P(DURATION)", True),
        ("parts", "M(P(T['v3.Part']))", False), ("-", "S", False), ("Plain", "U", False))
    assert schema.layouts["v3.Part"].fields == (("weight", "F", False),
                                                 ("next", "P(T['v3.Part'])", True))


def test_validate_tags_and_config_shapes(schema: Schema) -> None:
    _widget(schema)
    assert schema.validate["v3.WidgetSpec"] == (("Low", "omitempty,gte=0"),
                                                ("High", "omitempty,gte=0"))
    # A marshaler's own fields keep their tags: the validator walks them.
    assert schema.validate["numorstring.Port"] == (("portName", "omitempty,portName"),)
    assert schema.config_fields("v3.WidgetSpec") == [
        ("Low", "Low", "int", ""), ("High", "High", "int", ""),
        ("WidgetMode", "mode", "*string", ""), ("Ports", "ports", "[]Port", ""),
        ("Every", "every", "*Duration", "seconds"), ("Parts", "parts", "map", ""),
        ("Dash", "-", "string", ""), ("Plain", "Plain", "uint", "")]


def test_two_fields_with_one_json_name_are_refused(schema: Schema) -> None:
    # Go drops both; a table that silently lost a field would be wrong, so the tool stops.
    source = schema.dirs[API_MODULE] / "pkg/apis/projectcalico/v3/widget.go"
    source.write_text(WIDGET.replace("Low, High int32 `", 'Low, High int32 `json:"low" '),
                      "utf-8")
    with pytest.raises(GoSourceError, match="two fields named 'low'"):
        _widget(schema)


def test_a_marshaler_without_an_encoder_stops_the_generator(schema: Schema) -> None:
    with pytest.raises(GoSourceError, match="Marshaled has its own MarshalJSON"):
        schema.layout("v3.Odd", Named(f"{API_MODULE}/pkg/apis/projectcalico/v3", "Odd"))


def test_an_embedded_marshaler_stops_the_generator(schema: Schema) -> None:
    source = schema.dirs[API_MODULE] / "pkg/apis/projectcalico/v3/widget.go"
    source.write_text(WIDGET + "\ntype Wrapped struct {\n\tMarshaled\n}\n", "utf-8")
    with pytest.raises(GoSourceError, match="promotes its MarshalJSON"):
        schema.layout("v3.Wrapped", Named(f"{API_MODULE}/pkg/apis/projectcalico/v3", "Wrapped"))


def test_a_struct_outside_the_known_packages_is_named() -> None:
    with pytest.raises(GoSourceError, match="outside the checkouts"):
        Schema({}).package("example.com/other")


def test_tokens_and_tags() -> None:
    toks = [t.text for t in tokenize('x := `a\nb` // c\ny++\n', "t.go")]
    assert toks == ["x", ":=", "`a\nb`", ";", "y", "++", ";"]
    tag = 'json:"name,omitempty" validate:"oneof=A B" protobuf:"bytes,1"'
    assert tag_get(tag, "json") == "name,omitempty"
    assert tag_get(tag, "validate") == "oneof=A B"
    assert tag_get(tag, "yaml") is None
