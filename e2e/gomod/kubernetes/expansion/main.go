// Command expansion applies the kubelet's own $(VAR) expansion to strings, for the tests that check that no user
// text placed in a container's command, args or env values expands (tests/test_expansion.py).
//
// It reads one JSON object from stdin, {"cases": [{"env": [[NAME, VALUE], ...], "texts": [...]}, ...]}, and writes
// {"expanded": [[...], ...]}: each text expanded exactly as the kubelet expands command and args
// (pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs: expansion.MappingFuncFor over the container's
// env) with k8s.io/kubernetes/third_party/forked/golang/expansion at the pinned Kubernetes release. Env values are
// expanded the way kubelet_pods.go makeEnvironmentVariables does: in order, each from the ones before it.
package main

import (
	"encoding/json"
	"os"

	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

type caseIn struct {
	Env   [][2]string `json:"env"`
	Texts []string    `json:"texts"`
}

func main() {
	var in struct {
		Cases []caseIn `json:"cases"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		os.Stderr.WriteString("expansion: " + err.Error() + "\n")
		os.Exit(2)
	}
	out := struct {
		Expanded [][]string `json:"expanded"`
		Env      [][]string `json:"env"`
	}{}
	for _, c := range in.Cases {
		// env values: each expanded from the variables defined before it (makeEnvironmentVariables)
		tmp := map[string]string{}
		values := []string{}
		for _, kv := range c.Env {
			v := expansion.Expand(kv[1], expansion.MappingFuncFor(tmp))
			tmp[kv[0]] = v
			values = append(values, v)
		}
		mapping := expansion.MappingFuncFor(tmp)
		texts := []string{}
		for _, t := range c.Texts {
			texts = append(texts, expansion.Expand(t, mapping))
		}
		out.Expanded = append(out.Expanded, texts)
		out.Env = append(out.Env, values)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
