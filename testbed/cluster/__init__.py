"""The test cluster: a real kube-apiserver + etcd on loopback, its CRDs, the objects made in it and
their bodies, loopback addresses, a watch of checker pods, and a Pod Security Standards judge of pod
specs."""
