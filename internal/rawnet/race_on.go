//go:build race

package rawnet

const raceBuild = true
