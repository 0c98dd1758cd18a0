import Crypto
import Foundation

/// What a backend's server holds for one folder, read on the server's side, never through
/// the code under test: the folder behind the server (local, WebDAV, SFTP, rclone's S3),
/// S3 listings made by curl (moto's objects, every S3's multipart uploads), the Dropbox
/// emulator's own state. "Nothing left" and "stored exactly" are judged on this.
struct ServerContents: Equatable {
    /// Every object or file under the folder, subfolders and temporaries included, by its
    /// path relative to the folder, with the SHA-256 (hex) of its bytes.
    var stored: [String: String] = [:]
    /// Uploads started and never finished: S3 multipart uploads under the folder (by key),
    /// Dropbox's open upload sessions (by id, server-wide: a session has no path until it
    /// is finished, so a test compares them before and after).
    var unfinished: Set<String> = []

    static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    static func sha256(file: String) throws -> String {
        sha256(try Data(contentsOf: URL(fileURLWithPath: file)))
    }

    /// The regular files below `root` by relative path, with their SHA-256; nothing when
    /// `root` does not exist.
    static func files(under root: String) throws -> [String: String] {
        guard let walker = FileManager.default.enumerator(atPath: root) else { return [:] }
        var found: [String: String] = [:]
        while let relative = walker.nextObject() as? String {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root + "/" + relative, isDirectory: &isFolder), !isFolder.boolValue else {
                continue
            }
            found[relative] = try sha256(file: root + "/" + relative)
        }
        return found
    }
}
