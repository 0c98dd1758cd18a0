import CISAL

/// CRC-32 (the ZIP/gzip polynomial) with ISA-L's folded PCLMUL implementation: about 3×
/// zlib's on this CPU (8-9 GB/s against 3 GB/s per core). Same values as zlib's `crc32`,
/// and chainable the same way: pass the previous result as `crc`.
///
/// (SHA-256 stays with swift-crypto: on Linux that is BoringSSL, which uses SHA-NI like
/// OpenSSL's EVP; both measured 1.3-1.4 GiB/s per core here, within noise of each other.)
enum CRC32 {
    static func update(_ crc: UInt32, _ bytes: UnsafeRawPointer, count: Int) -> UInt32 {
        crc32_gzip_refl(crc, bytes.assumingMemoryBound(to: UInt8.self), UInt64(count))
    }
}
