package sysaddons

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"

	"github.com/rigger/rigger/spec/rkemeta"
)

// templateFuncs are the functions RKE's add-on templates call, as RKE's
// templates.CompileTemplateFromMap gives them: toYaml and
// GetKubednsStubDomains as RKE writes them, and the sprig functions the
// templates use, taken from sprig v3.2.2 (RKE's version) so that they
// behave exactly as in RKE. RKE hands the templates all of sprig; rigger
// gives them only these, so that no template can read the environment, the
// clock or randomness and Render stays a pure function. Every template
// rigger keeps is parsed with them by a test.
func templateFuncs() template.FuncMap {
	sp := sprig.TxtFuncMap()
	fm := template.FuncMap{
		"toYaml":                toYAML,
		"GetKubednsStubDomains": kubednsStubDomains,
	}
	for _, name := range []string{"default", "indent", "first", "last", "splitList"} {
		fm[name] = sp[name]
	}
	return fm
}

// toYAML is RKE's templates.ToYAML: v as JSON, then as YAML, without the
// last newline. RKE logs a value that does not marshal and writes nothing;
// rigger's values always marshal, and an error would stop the render.
func toYAML(v any) (string, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(y), "\n"), nil
}

// kubednsStubDomains is RKE's templates.GetKubednsStubDomains.
func kubednsStubDomains(stubDomains map[string][]string) string {
	j, _ := json.Marshal(stubDomains)
	return string(j)
}

// compile renders RKE's template of addon (an rkemeta add-on key) for
// kubernetes_version k8sVersion with data, as RKE's
// templates.GetVersionedTemplates and CompileTemplateFromMap do. It returns
// the template's key with the text.
func compile(addon, k8sVersion string, data any) (key string, out []byte, err error) {
	key, text, err := rkemeta.Template(addon, k8sVersion)
	if err != nil {
		return key, nil, err
	}
	t, err := template.New("compiled_template").Funcs(templateFuncs()).Parse(text)
	if err != nil {
		return key, nil, fmt.Errorf("parse template %s: %w", key, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return key, nil, fmt.Errorf("render template %s: %w", key, err)
	}
	return key, b.Bytes(), nil
}
