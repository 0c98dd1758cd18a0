import Foundation

/// Replaces one entry of `archive`, in place, through libzip itself: every other entry is
/// copied as it is (raw, not recompressed), which Python's zipfile cannot do and which keeps
/// a database's deflate blocks as the manifest lists them. With `password`, the new entry
/// is AES-256 encrypted (Python's zipfile cannot write AES either).
func replaceZipEntry(_ archive: String, entry: String, content: String, password: String? = nil) throws {
    let file = archive + ".entry-\(UUID().uuidString)"
    try Data(content.utf8).write(to: URL(fileURLWithPath: file))
    defer { try? FileManager.default.removeItem(atPath: file) }
    try replaceZipEntry(archive, entry: entry, file: file, password: password)
}

/// Replaces one entry of `archive` with the bytes of `file` (any bytes: a database), as
/// ``replaceZipEntry(_:entry:content:password:)`` does.
func replaceZipEntry(_ archive: String, entry: String, file: String, password: String? = nil) throws {
    try runPythonScript(
        """
        import ctypes, sys
        path, name, password = sys.argv[1], sys.argv[2].encode(), sys.argv[4].encode()
        content = open(sys.argv[3], "rb").read()
        z = ctypes.CDLL("libzip.so.4")
        z.zip_open.restype = ctypes.c_void_p; z.zip_source_buffer.restype = ctypes.c_void_p
        z.zip_name_locate.restype = ctypes.c_int64
        err = ctypes.c_int(0)
        archive = z.zip_open(path.encode(), 0, ctypes.byref(err))
        assert archive, err.value
        index = z.zip_name_locate(ctypes.c_void_p(archive), name, 0)
        assert index >= 0
        data = ctypes.create_string_buffer(content, len(content))
        source = z.zip_source_buffer(ctypes.c_void_p(archive), data, ctypes.c_uint64(len(content)), 0)
        assert z.zip_file_replace(ctypes.c_void_p(archive), ctypes.c_uint64(index), ctypes.c_void_p(source), 0) == 0
        if password:
            assert z.zip_file_set_encryption(ctypes.c_void_p(archive), ctypes.c_uint64(index), ctypes.c_uint16(259), password) == 0
        assert z.zip_close(ctypes.c_void_p(archive)) == 0
        """, [archive, entry, file, password ?? ""])
}
