import Foundation

/// A parsed XML document as a small tree, for the listings S3 and WebDAV answer with.
/// Element names are kept without namespace prefixes ("D:href" → "href"). A value: once
/// parsed, a tree is never changed, and can be handed between threads.
struct XMLElement: Sendable {
    let name: String
    var text = ""
    var children: [XMLElement] = []

    init(name: String) { self.name = name }

    func child(_ name: String) -> XMLElement? { children.first { $0.name == name } }
    func all(_ name: String) -> [XMLElement] { children.filter { $0.name == name } }

    /// Every descendant (depth first) with this name.
    func descendants(_ name: String) -> [XMLElement] {
        children.flatMap { ($0.name == name ? [$0] : []) + $0.descendants(name) }
    }

    func value(_ name: String) -> String? { child(name)?.text.trimmingCharacters(in: .whitespacesAndNewlines) }

    static func parse(_ data: Data) throws -> XMLElement {
        var reader = XMLReader(data)
        do {
            return try reader.read()
        } catch let malformed as XMLReader.Malformed {
            throw StoreBackupError.transferFailed(.other, label: "", "the server's XML answer could not be parsed: \(malformed.reason)")
        }
    }
}
