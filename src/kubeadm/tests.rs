//! Unit tests on fixtures copied from a kubeadm v1.36.2 node.
