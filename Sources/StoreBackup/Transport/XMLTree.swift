import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

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
        let builder = XMLTreeBuilder()
        let parser = XMLParser(data: data)
        parser.delegate = builder
        parser.shouldProcessNamespaces = true
        guard parser.parse(), let root = builder.root else {
            throw StoreBackupError.transferFailed(.other, label: "", "the server's XML answer could not be parsed")
        }
        return root
    }
}

/// Builds the tree bottom-up: an element joins its parent's children once it ends.
private final class XMLTreeBuilder: NSObject, XMLParserDelegate {
    var root: XMLElement?
    /// The elements open at this point of the document, outermost first.
    private var stack: [XMLElement] = []

    func parser(
        _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
        qualifiedName: String?, attributes: [String: String] = [:]
    ) {
        let name = elementName.split(separator: ":").last.map(String.init) ?? elementName
        stack.append(XMLElement(name: name))
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
        guard let element = stack.popLast() else { return }
        if stack.isEmpty {
            if root == nil { root = element }
        } else {
            stack[stack.count - 1].children.append(element)
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        guard !stack.isEmpty else { return }
        stack[stack.count - 1].text += string
    }
}
