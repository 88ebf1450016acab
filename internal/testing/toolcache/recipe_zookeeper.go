package toolcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvZooKeeperClasspath names a ZooKeeper classpath to use instead of the Debian package's (a
// ZooKeeper unpacked elsewhere).
const EnvZooKeeperClasspath = "GALLEON_ZOOKEEPER_CLASSPATH"

// zooKeeperDeps are the jars zookeeper.jar's manifest (Class-Path) names in Debian's
// libzookeeper-java 3.8, in that order, then slf4j-simple so that the server logs (to stderr).
func zooKeeperDeps() []string {
	return []string{"zookeeper-jute", "commons-cli", "commons-io", "findbugs-annotations", "jackson-annotations", "jackson-core",
		"jackson-databind", "jetty9-client", "jetty9-http", "jetty9-io", "jetty9-security", "jetty9-server", "jetty9-servlet",
		"jetty9-util", "jline", "metrics-core", "netty-buffer", "netty-common", "netty-handler", "netty-transport",
		"netty-transport-native-epoll", "netty-resolver", "netty-codec", "netty-transport-native-unix-common",
		"slf4j-api", "snappy-java", "slf4j-simple"}
}

// ZooKeeperClasspath returns the Java classpath that runs Apache ZooKeeper 3.8
// (org.apache.zookeeper.server.ZooKeeperServerMain), ':'-separated: $GALLEON_ZOOKEEPER_CLASSPATH
// if set, else zookeeper.jar and the jars of the Debian layout that are present in
// ${GALLEON_ZOOKEEPER_JAVA_DIR:-/usr/share/java}. When zookeeper.jar is missing it installs the
// Debian package zookeeper (Debian bookworm: 3.8.0, about 10 s; it pulls in a JRE and every jar
// the manifest names), which needs root or sudo.
func ZooKeeperClasspath(ctx context.Context) (string, error) {
	if cp := os.Getenv(EnvZooKeeperClasspath); cp != "" {
		return cp, nil
	}
	javaDir := os.Getenv("GALLEON_ZOOKEEPER_JAVA_DIR")
	if javaDir == "" {
		javaDir = "/usr/share/java"
	}
	jar := filepath.Join(javaDir, "zookeeper.jar")
	if _, err := os.Stat(jar); err != nil {
		if err := AptInstall(ctx, "zookeeper", "ZooKeeper ("+jar+")",
			"install the Debian package zookeeper by hand, or set "+EnvZooKeeperClasspath+" to a ZooKeeper 3.8 classpath", "zookeeper"); err != nil {
			return "", err
		}
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("zookeeper: the zookeeper package is installed but %s is not there: set %s to ZooKeeper's jars", jar, EnvZooKeeperClasspath)
		}
	}
	cp := []string{jar}
	for _, d := range zooKeeperDeps() {
		if p := filepath.Join(javaDir, d+".jar"); fileExists(p) {
			cp = append(cp, p)
		}
	}
	return strings.Join(cp, ":"), nil
}

// Java returns the java binary that runs ZooKeeper: $JAVA_HOME/bin/java if executable, else java
// on PATH.
func Java() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		if p := filepath.Join(home, "bin", "java"); CheckExecutable(p) == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("zookeeper: java is not on PATH (nor in $JAVA_HOME/bin): install a JRE >= 11 (apt-get install default-jre-headless) and run again")
	}
	return p, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
