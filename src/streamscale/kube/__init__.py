"""A local Kubernetes for tries and tests: etcd and the control plane built from Go modules by
``make setup`` (:mod:`.controlplane`, certificates by :mod:`.pki`), and the node agent that
runs pods as local processes (:mod:`.node_agent`)."""
