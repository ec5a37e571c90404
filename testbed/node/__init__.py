"""The real single node (kubelet + containerd + runc + CNI) and the end-to-end test bed on it."""
