package proxyconf

// MaxLineLen is maxLineLen, for the fuzz test, which runs outside the package to share its seeds with the
// guest packages' fuzz targets (internal/testing/proxyconftest).
const MaxLineLen = maxLineLen
