package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
)

// startControllers runs the two kube-controller-manager controllers a test
// cluster without kubelets needs: the garbage collector (ownerReference
// cascades, foreground/orphan deletion) and the namespace controller (deleting
// a namespace deletes its contents and then the namespace). It is wired the
// way kube-controller-manager's core.go wires them. The returned function
// waits (bounded) for them to stop after ctx is cancelled.
func startControllers(ctx context.Context, cfg *rest.Config) (waitStopped func(time.Duration), err error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = "tgcp-controllers"

	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	shared := informers.NewSharedInformerFactory(kc, 0)
	mdInformers := metadatainformer.NewSharedInformerFactory(md, 0)
	started := make(chan struct{})

	gb := garbagecollector.NewDependencyGraphBuilder(ctx, md, mapper,
		garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(shared, mdInformers), started)
	gc, err := garbagecollector.NewComposedGarbageCollector(ctx, kc, md, mapper, gb)
	if err != nil {
		return nil, fmt.Errorf("garbage collector: %w", err)
	}

	nsc := namespacecontroller.NewNamespaceController(ctx, kc, md,
		kc.Discovery().ServerPreferredNamespacedResources,
		shared.Core().V1().Namespaces(), 5*time.Minute, v1.FinalizerKubernetes)

	shared.Start(ctx.Done())
	mdInformers.Start(ctx.Done())
	close(started)

	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	// kube-controller-manager uses 30s; 5s lets GC notice new CRD kinds quickly in tests.
	const syncPeriod = 5 * time.Second
	run(func() { wait.Until(mapper.Reset, syncPeriod, ctx.Done()) })
	run(func() { gc.Run(ctx, 10, syncPeriod) })
	run(func() { gc.Sync(ctx, dc, syncPeriod) })
	run(func() { nsc.Run(ctx, 5) })

	return func(d time.Duration) {
		done := make(chan struct{})
		go func() { wg.Wait(); shared.Shutdown(); close(done) }()
		select {
		case <-done:
		case <-time.After(d):
		}
	}, nil
}
