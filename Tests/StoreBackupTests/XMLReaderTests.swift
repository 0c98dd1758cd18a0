import Foundation
import XCTest

@testable import StoreBackup

final class XMLReaderTests: XCTestCase {
    private func parse(_ text: String) throws -> XMLElement { try XMLElement.parse(Data(text.utf8)) }

    func testReadsAnS3Listing() throws {
        let root = try parse(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Name>bench</Name><IsTruncated>true</IsTruncated>
              <Contents><Key>a/2026-12-05 031500 Stores.zip</Key><Size>887426246</Size><ETag>&quot;9b2c&quot;</ETag></Contents>
              <Contents><Key>a/R&amp;D &lt;x&gt; &#233;&#x1F600;</Key><Size>1</Size></Contents>
              <NextContinuationToken>1/+=</NextContinuationToken>
            </ListBucketResult>
            """)
        XCTAssertEqual(root.name, "ListBucketResult")
        XCTAssertEqual(root.value("IsTruncated"), "true")
        XCTAssertEqual(root.all("Contents").compactMap { $0.value("Key") }, ["a/2026-12-05 031500 Stores.zip", "a/R&D <x> é😀"])
        XCTAssertEqual(root.all("Contents").first?.value("ETag"), "\"9b2c\"")
        XCTAssertEqual(root.value("NextContinuationToken"), "1/+=")
    }

    func testReadsAWebDAVAnswerWithoutItsNamespacePrefixes() throws {
        let root = try parse(
            """
            <?xml version="1.0" encoding="utf-8"?>
            <!-- a comment -->
            <D:multistatus xmlns:D="DAV:" xmlns:lp1='DAV:'>
            <D:response><D:href>/dav/2026-12-05%20031500%20Stores.zip</D:href>
            <D:propstat><D:prop><lp1:getcontentlength>42</lp1:getcontentlength><D:resourcetype/>
            <D:displayname><![CDATA[a <b> & c]]></D:displayname></D:prop>
            <D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            </D:multistatus>
            """)
        XCTAssertEqual(root.name, "multistatus")
        let response = try XCTUnwrap(root.all("response").first)
        XCTAssertEqual(response.value("href"), "/dav/2026-12-05%20031500%20Stores.zip")
        let prop = try XCTUnwrap(response.child("propstat")?.child("prop"))
        XCTAssertEqual(prop.value("getcontentlength"), "42")
        XCTAssertNotNil(prop.child("resourcetype"))
        XCTAssertEqual(prop.value("displayname"), "a <b> & c")
        XCTAssertEqual(root.descendants("status").map { $0.text }, ["HTTP/1.1 200 OK"])
    }

    func testRefusesWhatNoServerSends() {
        let deep = String(repeating: "<a>", count: XMLReader.maxDepth + 1) + String(repeating: "</a>", count: XMLReader.maxDepth + 1)
        let refused: [String: String] = [
            "a document type": "<!DOCTYPE x [<!ENTITY e \"boom\">]><x>&e;</x>",
            "an unknown entity": "<x>&e;</x>",
            "a mismatched end tag": "<x><y></x></y>",
            "an unclosed element": "<x><y></y>",
            "two roots": "<x/><y/>",
            "text outside": "junk<x/>",
            "no element": "   ",
            "a NUL reference": "<x>&#0;</x>",
            "an unquoted attribute": "<x a=b/>",
            "an unterminated comment": "<x><!-- </x>",
            "nesting too deep": deep,
        ]
        for (what, text) in refused {
            XCTAssertThrowsError(try parse(text), what) { error in
                XCTAssertTrue("\(error)".contains("could not be parsed"), "\(what): \(error)")
            }
        }
        XCTAssertThrowsError(try XMLElement.parse(Data([0x3C, 0x78, 0x3E, 0xFF, 0xFE, 0x3C, 0x2F, 0x78, 0x3E])), "invalid UTF-8")
        let deepest = XMLReader.maxDepth
        XCTAssertNoThrow(try parse(String(repeating: "<a>", count: deepest) + String(repeating: "</a>", count: deepest)))
    }
}
