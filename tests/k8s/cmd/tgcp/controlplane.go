package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/sys/unix"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// statusOut is where the control plane's own short messages go (the real
// stderr, even when fd 2 is redirected to the log file).
var statusOut io.Writer = os.Stderr

func logf(format string, args ...any) {
	fmt.Fprintf(statusOut, "tgcp: "+format+"\n", args...)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runControlPlane(argv []string) int {
	fs := flag.NewFlagSet("tgcp", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory (kubeconfig, ready, pki, logs); created if missing")
	logFile := fs.String("log-file", "", "where apiserver/etcd logs go (default DIR/control-plane.log; \"-\" = stderr)")
	verbosity := fs.Int("v", 0, "kube-apiserver klog verbosity")
	noControllers := fs.Bool("no-controllers", false, "do not run the garbage-collector and namespace controllers")
	stdinEOF := fs.Bool("exit-on-stdin-close", false, "shut down when stdin reaches EOF (parent died)")
	readyTimeout := fs.Duration("ready-timeout", 3*time.Minute, "give up if not ready by then")
	var extra multiFlag
	fs.Var(&extra, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--feature-gates=X=true (repeatable)")
	showVersion := fs.Bool("version", false, "print the Kubernetes version and exit")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println(version.Get().GitVersion)
		return 0
	}
	if *dir == "" {
		logf("--dir is required")
		return 2
	}
	d, err := filepath.Abs(*dir)
	if err != nil {
		logf("%v", err)
		return 2
	}
	cp := &controlPlane{dir: d, verbosity: *verbosity, extraArgs: extra, controllers: !*noControllers}
	return cp.main(*logFile, *stdinEOF, *readyTimeout)
}

type controlPlane struct {
	dir         string
	verbosity   int
	extraArgs   []string
	controllers bool

	runDir  string // DIR/run: pki + etcd data, removed on exit
	etcdDir string
	url     string

	ca, serving, admin, kcm *keyPair
	saKeyPEM                []byte
	adminToken              string
}

func (cp *controlPlane) main(logFile string, stdinEOF bool, readyTimeout time.Duration) int {
	if err := os.MkdirAll(cp.dir, 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	// A stale ready file from an earlier run must never be seen as ready.
	_ = os.Remove(filepath.Join(cp.dir, "ready"))

	if logFile == "" {
		logFile = filepath.Join(cp.dir, "control-plane.log")
	}
	if logFile != "-" {
		if err := redirectStderr(logFile); err != nil {
			logf("redirecting logs: %v", err)
			return 1
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			logf("stdin closed")
			stop()
		}()
	}

	code := cp.run(ctx, readyTimeout)
	_ = os.Remove(filepath.Join(cp.dir, "ready"))
	if err := os.RemoveAll(cp.runDir); err != nil {
		logf("removing %s: %v", cp.runDir, err)
	}
	return code
}

// redirectStderr points fd 2 at a log file (klog, etcd's zap and Go panics all
// write there) and keeps the original stderr for our own status lines.
func redirectStderr(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	orig, err := unix.Dup(2)
	if err != nil {
		return err
	}
	unix.CloseOnExec(orig)
	statusOut = os.NewFile(uintptr(orig), "stderr")
	return unix.Dup2(int(f.Fd()), 2)
}

func (cp *controlPlane) run(ctx context.Context, readyTimeout time.Duration) int {
	cp.runDir = filepath.Join(cp.dir, "run")
	_ = os.RemoveAll(cp.runDir)
	pkiDir := filepath.Join(cp.runDir, "pki")
	cp.etcdDir = filepath.Join(cp.runDir, "etcd")
	for _, d := range []string{pkiDir, cp.etcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			logf("%v", err)
			return 1
		}
	}
	if err := cp.makePKI(pkiDir); err != nil {
		logf("pki: %v", err)
		return 1
	}

	// etcd
	etcd, etcdURL, err := startEtcd(cp.etcdDir)
	if err != nil {
		logf("etcd: %v", err)
		return 1
	}
	closeEtcd := func() {
		done := make(chan struct{})
		go func() { etcd.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			logf("etcd did not close within 15s")
		}
	}

	// kube-apiserver
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeEtcd()
		logf("listen: %v", err)
		return 1
	}
	port := ln.Addr().(*net.TCPAddr).Port
	cp.url = "https://127.0.0.1:" + strconv.Itoa(port)

	apiCtx, apiCancel := context.WithCancel(context.Background())
	defer apiCancel()
	apiDone := make(chan error, 1)
	if err := cp.startAPIServer(apiCtx, ln, port, pkiDir, etcdURL, apiDone); err != nil {
		apiCancel()
		closeEtcd()
		logf("kube-apiserver: %v", err)
		return 1
	}

	shutdown := func() int {
		apiCancel()
		select {
		case <-apiDone:
		case <-time.After(20 * time.Second):
			logf("kube-apiserver did not stop within 20s")
		}
		closeEtcd()
		return 0
	}

	// readiness
	if err := cp.waitReady(ctx, apiDone, readyTimeout); err != nil {
		if ctx.Err() != nil {
			return shutdown()
		}
		logf("not ready: %v", err)
		shutdown()
		return 1
	}

	ctrlCtx, ctrlCancel := context.WithCancel(context.Background())
	defer ctrlCancel()
	var waitCtrl func(time.Duration)
	if cp.controllers {
		if waitCtrl, err = startControllers(ctrlCtx, cp.restConfig(cp.kcm)); err != nil {
			logf("controllers: %v", err)
			shutdown()
			return 1
		}
	}

	if err := cp.writeOutputs(); err != nil {
		logf("%v", err)
		ctrlCancel()
		shutdown()
		return 1
	}
	fmt.Println(cp.url)
	logf("ready: %s (kubeconfig %s)", cp.url, filepath.Join(cp.dir, "kubeconfig"))

	code := 0
	select {
	case <-ctx.Done():
		logf("shutting down")
	case err := <-apiDone:
		logf("kube-apiserver exited unexpectedly: %v", err)
		apiDone <- err // let shutdown() see it
		code = 1
	}
	_ = os.Remove(filepath.Join(cp.dir, "ready"))
	ctrlCancel()
	if waitCtrl != nil {
		waitCtrl(5 * time.Second)
	}
	if c := shutdown(); c != 0 {
		code = c
	}
	logf("stopped")
	return code
}

func (cp *controlPlane) makePKI(dir string) (err error) {
	if cp.ca, err = newCA("tenant-gateway-test-ca"); err != nil {
		return err
	}
	if _, _, err = cp.ca.write(dir, "ca"); err != nil {
		return err
	}
	cp.serving, err = cp.ca.issueServing("kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")})
	if err != nil {
		return err
	}
	if _, _, err = cp.serving.write(dir, "apiserver"); err != nil {
		return err
	}
	if cp.admin, err = cp.ca.issueClient("admin", "system:masters"); err != nil {
		return err
	}
	if cp.kcm, err = cp.ca.issueClient("system:kube-controller-manager", "system:masters"); err != nil {
		return err
	}
	_, saKey, err := newKey()
	if err != nil {
		return err
	}
	cp.saKeyPEM = saKey
	if err = os.WriteFile(filepath.Join(dir, "sa.key"), saKey, 0o600); err != nil {
		return err
	}
	cp.adminToken = randomToken()
	// token,user,uid,"group1,group2"
	return os.WriteFile(filepath.Join(dir, "tokens.csv"),
		[]byte(fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", cp.adminToken)), 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startEtcd(dataDir string) (*embed.Etcd, string, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cport, err := freePort()
		if err != nil {
			return nil, "", err
		}
		pport, err := freePort()
		if err != nil {
			return nil, "", err
		}
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, "", err
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, "", err
		}
		cfg := embed.NewConfig()
		cfg.Name = "tgcp"
		cfg.Dir = dataDir
		curl := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(cport)}
		purl := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(pport)}
		cfg.ListenClientUrls = []url.URL{curl}
		cfg.AdvertiseClientUrls = []url.URL{curl}
		cfg.ListenPeerUrls = []url.URL{purl}
		cfg.AdvertisePeerUrls = []url.URL{purl}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.UnsafeNoFsync = true
		cfg.Logger = "zap"
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{"stderr"}
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, curl.String(), nil
		case err := <-e.Err():
			e.Close()
			lastErr = err
		case <-time.After(60 * time.Second):
			e.Server.Stop()
			e.Close()
			return nil, "", errors.New("etcd not ready within 60s")
		}
	}
	return nil, "", lastErr
}

func (cp *controlPlane) startAPIServer(ctx context.Context, ln net.Listener, port int, pkiDir, etcdURL string, done chan<- error) error {
	s := options.NewServerRunOptions()
	pfs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		pfs.AddFlagSet(f)
	}
	p := func(name string) string { return filepath.Join(pkiDir, name) }
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + pkiDir,
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--token-auth-file=" + p("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.key"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy",
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=" + strconv.Itoa(cp.verbosity),
	}
	args = append(args, cp.extraArgs...)
	if err := pfs.Parse(args); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = port

	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return err
	}
	// Loopback clients should not log self-issued warnings (as NewAPIServerCommand does).
	rest.SetDefaultWarningHandler(rest.NoWarnings{})

	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	if mfg, ok := featureGate.(featuregate.MutableFeatureGate); ok {
		mfg.AddMetrics()
	}
	s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
	klog.InfoS("tgcp starting kube-apiserver", "url", cp.url, "version", version.Get().GitVersion)
	go func() { done <- app.Run(ctx, completed) }()
	return nil
}

func (cp *controlPlane) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(cp.ca.cert)
	cert, _ := tls.X509KeyPair(cp.admin.certPEM, cp.admin.keyPEM)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		},
	}
}

// waitReady polls until /readyz is 200 and namespace "default" exists.
func (cp *controlPlane) waitReady(ctx context.Context, apiDone chan error, timeout time.Duration) error {
	c := cp.httpClient()
	deadline := time.Now().Add(timeout)
	get := func(path string) int {
		resp, err := c.Get(cp.url + path)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for {
		if get("/readyz") == 200 && get("/api/v1/namespaces/default") == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-apiDone:
			apiDone <- err
			return fmt.Errorf("kube-apiserver exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (cp *controlPlane) restConfig(user *keyPair) *rest.Config {
	return &rest.Config{
		Host: cp.url,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.ca.certPEM,
			CertData: user.certPEM,
			KeyData:  user.keyPEM,
		},
	}
}

// writeAtomic writes via a temp file in the same directory and a rename.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeOutputs writes DIR/pki/{ca.crt,ca.key}, DIR/admin.token,
// DIR/kubeconfig and, last, DIR/ready (containing the API URL).
func (cp *controlPlane) writeOutputs() error {
	pub := filepath.Join(cp.dir, "pki")
	if err := os.MkdirAll(pub, 0o700); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(pub, "ca.crt"), cp.ca.certPEM, 0o644); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(pub, "ca.key"), cp.ca.keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(cp.dir, "admin.token"), []byte(cp.adminToken+"\n"), 0o600); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tgcp"] = &clientcmdapi.Cluster{Server: cp.url, CertificateAuthorityData: cp.ca.certPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.admin.certPEM, ClientKeyData: cp.admin.keyPEM}
	kc.Contexts["admin"] = &clientcmdapi.Context{Cluster: "tgcp", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "admin"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(cp.dir, "kubeconfig"), data, 0o600); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(cp.dir, "ready"), []byte(cp.url+"\n"), 0o644)
}
