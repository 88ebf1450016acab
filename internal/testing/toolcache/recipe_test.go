package toolcache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRepo makes a repository root (a go.mod of the main module) with a wrapper module whose
// go.sum is gosum, makes it the working directory and an empty tool cache, and returns the root.
func fakeRepo(t *testing.T, gosum string) string {
	t.Helper()
	root := t.TempDir()
	t.Setenv("GALLEON_CACHE", t.TempDir())
	write(t, filepath.Join(root, "go.mod"), "module "+modulePath+"\n\ngo 1.26\n")
	write(t, filepath.Join(root, "tools", "fake", "go.mod"), "module fake\n\ngo 1.26\n\nrequire example.com/upstream v1.2.3\n")
	write(t, filepath.Join(root, "tools", "fake", "go.sum"), gosum)
	t.Chdir(root)
	return root
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// countingRecipe builds a shell script that prints build number n, counting builds in *builds.
func countingRecipe(builds *int) Recipe {
	return Recipe{
		Name: "fake", Version: "1.2.3", EnvVar: "GALLEON_FAKE_TEST_BIN", Make: "fake", ModDir: "tools/fake",
		Module: "example.com/upstream", ModuleVersion: "v1.2.3", PinFix: "fix the fake",
		build: func(ctx context.Context, b buildRun) error {
			*builds++
			return os.WriteFile(b.out, []byte("#!/bin/sh\necho build "+string(rune('0'+*builds))+"\n"), 0o755)
		},
	}
}

func TestRecipeBuildsOnceAndAgainWhenGoSumChanges(t *testing.T) {
	root := fakeRepo(t, "example.com/upstream v1.2.3 h1:one=\n")
	t.Setenv("GALLEON_FAKE_TEST_BIN", "")
	builds := 0
	r := countingRecipe(&builds)
	ctx := context.Background()

	p, err := r.Build(ctx, nil)
	if err != nil || p != Bin("fake", "1.2.3") || builds != 1 {
		t.Fatalf("first Build = %q, %v after %d builds; want %s after 1", p, err, builds, Bin("fake", "1.2.3"))
	}
	var progress bytes.Buffer
	if _, err := r.Build(ctx, &progress); err != nil || builds != 1 || !strings.Contains(progress.String(), "using cached") {
		t.Fatalf("second Build: %v, %d builds, progress %q; want the cached binary", err, builds, progress.String())
	}
	// The Tool form is quiet about a cached binary.
	progress.Reset()
	if p, err := r.Tool().Build(ctx, &progress); err != nil || p != Bin("fake", "1.2.3") || progress.Len() != 0 || builds != 1 {
		t.Fatalf("Tool().Build = %q, %v, progress %q, %d builds", p, err, progress.String(), builds)
	}

	write(t, filepath.Join(root, "tools", "fake", "go.sum"), "example.com/upstream v1.2.3 h1:two=\n")
	progress.Reset()
	if _, err := r.Build(ctx, &progress); err != nil || builds != 2 {
		t.Fatalf("Build after go.sum changed: %v after %d builds; want a second build", err, builds)
	}
	if !strings.Contains(progress.String(), "built from another go.sum") {
		t.Errorf("progress does not say why it built again: %q", progress.String())
	}
	if _, err := r.Build(ctx, nil); err != nil || builds != 2 {
		t.Fatalf("Build after the rebuild: %v after %d builds; want none more", err, builds)
	}
}

func TestRecipeAdoptsABinaryWithoutStamp(t *testing.T) {
	fakeRepo(t, "example.com/upstream v1.2.3 h1:one=\n")
	t.Setenv("GALLEON_FAKE_TEST_BIN", "")
	bin := Bin("fake", "1.2.3")
	write(t, bin, "#!/bin/sh\n")
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	builds := 0
	r := countingRecipe(&builds)
	if p, err := r.Build(context.Background(), nil); err != nil || p != bin || builds != 0 {
		t.Fatalf("Build = %q, %v after %d builds; want the existing %s adopted", p, err, builds, bin)
	}
	if _, err := os.Stat(stampPath(bin)); err != nil {
		t.Errorf("the adopted binary has no stamp: %v", err)
	}
}

func TestRecipePinMismatchSaysWhatToDo(t *testing.T) {
	fakeRepo(t, "")
	t.Setenv("GALLEON_FAKE_TEST_BIN", "")
	builds := 0
	r := countingRecipe(&builds)
	r.ModuleVersion = "v9.9.9"
	_, err := r.Build(context.Background(), nil)
	if err == nil || builds != 0 {
		t.Fatalf("Build with a go.mod pinning another version: %v, %d builds", err, builds)
	}
	for _, want := range []string{"tools/fake/go.mod requires example.com/upstream v1.2.3, expected v9.9.9", "fix the fake"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestRecipeEnvOverride(t *testing.T) {
	fakeRepo(t, "")
	builds := 0
	r := countingRecipe(&builds)
	exe := filepath.Join(t.TempDir(), "fake")
	write(t, exe, "#!/bin/sh\n")
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GALLEON_FAKE_TEST_BIN", exe)
	if p, err := r.Build(context.Background(), nil); err != nil || p != exe || builds != 0 {
		t.Fatalf("Build with $GALLEON_FAKE_TEST_BIN = %q, %v, %d builds; want %s", p, err, builds, exe)
	}
	if p, err := r.Path(); err != nil || p != exe {
		t.Fatalf("Path with $GALLEON_FAKE_TEST_BIN = %q, %v", p, err)
	}
	t.Setenv("GALLEON_FAKE_TEST_BIN", filepath.Join(t.TempDir(), "missing"))
	if _, err := r.Build(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "does not exist") || builds != 0 {
		t.Fatalf("Build with a missing $GALLEON_FAKE_TEST_BIN: %v, %d builds", err, builds)
	}
}

func TestRecipePathBuildsNothing(t *testing.T) {
	fakeRepo(t, "")
	t.Setenv("GALLEON_FAKE_TEST_BIN", "")
	builds := 0
	_, err := countingRecipe(&builds).Path()
	if err == nil || builds != 0 {
		t.Fatalf("Path of a missing binary: %v after %d builds", err, builds)
	}
	for _, want := range []string{Bin("fake", "1.2.3") + " does not exist", "go run ./internal/testing/devtool build fake", "make fake"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestRecipeFailedBuildLeavesNothing(t *testing.T) {
	fakeRepo(t, "x\n")
	t.Setenv("GALLEON_FAKE_TEST_BIN", "")
	r := countingRecipe(new(int))
	r.build = func(ctx context.Context, b buildRun) error {
		write(t, b.out, "half a binary")
		return Failure(b.name, b.log, "a fake build", "nothing")
	}
	if _, err := r.Build(context.Background(), nil); err == nil || !strings.HasPrefix(err.Error(), "fake: ") {
		t.Fatalf("Build that fails: %v", err)
	}
	for _, p := range []string{Bin("fake", "1.2.3"), stampPath(Bin("fake", "1.2.3"))} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a failed build left %s", p)
		}
	}
}

// The recipes point at wrapper modules that pin what they say, so a build would not stop at
// CheckPin; and the cache names are the ones the warm caches hold.
func TestRecipesMatchTheirWrapperModules(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Skipf("not in the repository: %v", err)
	}
	recipes := []Recipe{Consul(), Polaris(), Staticcheck()}
	for _, name := range KubeToolNames() {
		r, err := KubeTool(name)
		if err != nil {
			t.Fatal(err)
		}
		recipes = append(recipes, r)
	}
	for _, rel := range IstiodReleases() {
		r, err := IstiodRecipe(rel.Name)
		if err != nil {
			t.Fatal(err)
		}
		recipes = append(recipes, r)
	}
	gen, grpc, err := ProtocPlugins(root)
	if err != nil {
		t.Fatal(err)
	}
	recipes = append(recipes, gen, grpc)
	wantNames := map[string]bool{
		"consul-1.22.6": true, "polaris-server-1.18.1": true, "staticcheck-v0.8.2": true,
		"kube-apiserver-1.36.3": true, "kubectl-1.36.3": true, "etcd-3.6.16": true, "helm-3.21.4": true,
		"pilot-discovery-1.29.2": true, "pilot-discovery-1.30-b01690e": true, "pilot-discovery-1.31-dev": true,
	}
	for _, r := range recipes {
		if err := r.CheckPin(root); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
		if _, err := r.inputsHash(root); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
		delete(wantNames, filepath.Base(r.CachePath()))
	}
	for name := range wantNames {
		t.Errorf("no recipe builds %s", name)
	}
}

func TestIstiodRecipes(t *testing.T) {
	def, err := IstiodRecipe(DefaultIstiodRelease)
	if err != nil || def.EnvVar != "GALLEON_PILOT_DISCOVERY" {
		t.Fatalf("the default release's recipe: %+v, %v; want GALLEON_PILOT_DISCOVERY to replace it", def, err)
	}
	other, err := IstiodRecipe("1.31-dev")
	if err != nil || other.EnvVar != "" {
		t.Fatalf("1.31-dev's recipe: %+v, %v; GALLEON_PILOT_DISCOVERY replaces the default release only", other, err)
	}
	_, err = IstiodRecipe("1.30.0")
	if err == nil || !strings.Contains(err.Error(), "known: 1.29.2 1.31-dev 1.30-b01690e") {
		t.Fatalf("an unknown release: %v", err)
	}
}

func TestZooKeeperClasspathFromTheDebianLayout(t *testing.T) {
	dir := t.TempDir()
	for _, jar := range []string{"zookeeper", "zookeeper-jute", "netty-codec", "slf4j-simple", "unrelated"} {
		write(t, filepath.Join(dir, jar+".jar"), "")
	}
	t.Setenv(EnvZooKeeperClasspath, "")
	t.Setenv("GALLEON_ZOOKEEPER_JAVA_DIR", dir)
	cp, err := ZooKeeperClasspath(context.Background())
	want := strings.Join([]string{dir + "/zookeeper.jar", dir + "/zookeeper-jute.jar", dir + "/netty-codec.jar", dir + "/slf4j-simple.jar"}, ":")
	if err != nil || cp != want {
		t.Fatalf("ZooKeeperClasspath = %q, %v; want %q", cp, err, want)
	}
	t.Setenv(EnvZooKeeperClasspath, "/elsewhere/zk.jar")
	if cp, err := ZooKeeperClasspath(context.Background()); err != nil || cp != "/elsewhere/zk.jar" {
		t.Fatalf("ZooKeeperClasspath with $%s = %q, %v", EnvZooKeeperClasspath, cp, err)
	}
}

func TestJavaFromJavaHome(t *testing.T) {
	home := t.TempDir()
	java := filepath.Join(home, "bin", "java")
	write(t, java, "#!/bin/sh\n")
	if err := os.Chmod(java, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JAVA_HOME", home)
	if p, err := Java(); err != nil || p != java {
		t.Fatalf("Java() = %q, %v; want %s", p, err, java)
	}
	t.Setenv("JAVA_HOME", "")
	t.Setenv("PATH", t.TempDir())
	if _, err := Java(); err == nil || !strings.Contains(err.Error(), "install a JRE") {
		t.Fatalf("Java() without java: %v", err)
	}
}

// The generator gives the committed wrapper module back from Consul's go.mod (when the module
// cache holds it: a machine that built Consul), the comment lines aside.
func TestConsulWrapperGoModIsTheCommittedOne(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Skipf("not in the repository: %v", err)
	}
	modCache, err := goOutput(context.Background(), root, nil, "env", "GOMODCACHE")
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := os.ReadFile(filepath.Join(modCache, "cache", "download", "github.com", "hashicorp", "consul", "@v", "v"+ConsulVersion+".mod"))
	if err != nil {
		t.Skipf("Consul's go.mod is not in the module cache (nothing built Consul here): %v", err)
	}
	committed, err := os.ReadFile(filepath.Join(root, "scripts", "tools", "consul", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := withoutComments(ConsulWrapperGoMod(string(upstream))), withoutComments(string(committed)); got != want {
		t.Errorf("ConsulWrapperGoMod differs from scripts/tools/consul/go.mod:\n%s\nwant\n%s", got, want)
	}
}

func withoutComments(gomod string) string {
	var keep []string
	for _, line := range strings.Split(gomod, "\n") {
		if !strings.HasPrefix(line, "//") {
			keep = append(keep, line)
		}
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

func TestKubeWrapperGoMod(t *testing.T) {
	upstream := "module k8s.io/kubernetes\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.0.0\n)\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/other => example.com/fork v1.0.0\n)\n"
	got := KubeWrapperGoMod(upstream, "v0.0.0-1-abc")
	for _, want := range []string{"\ngo 1.26.0\n", "\tistio.io/istio v0.0.0-1-abc\n", "\tk8s.io/kubernetes v" + KubeVersion + "\n",
		"replace (\n\tk8s.io/api => k8s.io/api v0." + strings.SplitN(KubeVersion, ".", 2)[1] + "\n)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("KubeWrapperGoMod lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "fork") {
		t.Errorf("KubeWrapperGoMod kept a replace that is not a staging module:\n%s", got)
	}
}
