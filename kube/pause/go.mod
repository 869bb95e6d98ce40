// The pod sandbox ("pause") program of `slinkyml dev kube`'s node, built by kube/build.sh and packed
// into an image by slinkyml/dev/images/images.py. Standard library only.
module slinkyml/kube/pause

go 1.26.0
