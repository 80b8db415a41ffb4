import Testing
@testable import MatteEngine

/// What the fuzz targets (Fuzz/, scripts/fuzz.sh) found, kept as plain tests too.
struct FuzzFindingsTests {
    /// Fuzz/URL: "https://[::p]:844//" gave the base "https://[::p]:844/" (one trailing slash of two
    /// dropped), whose requests then went to "…//v2/…"; every trailing slash goes.
    @Test func anInferenceServerURLLosesEveryTrailingSlash() throws {
        for (url, base) in [("http://h:8000//", "http://h:8000"), ("http://h:8000/triton///", "http://h:8000/triton"),
                            ("https://[::1]:8443/", "https://[::1]:8443"), ("http://h", "http://h")] {
            let parsed = try StepClient.parse(url)
            #expect(parsed.base == base, "\(url)")
            let again = try StepClient.parse(parsed.base)
            #expect(again.base == parsed.base, "\(url) does not parse to itself")
        }
    }

    /// MaskPixels.pack refuses what a decoder's plane cannot hold, before reading it.
    @Test func aMaskPlaneIsCheckedBeforeItIsRead() throws {
        let bytes = [UInt8](repeating: 7, count: 20)
        try bytes.withUnsafeBytes { (plane: UnsafeRawBufferPointer) throws in
            #expect(try MaskPixels.pack(plane, offset: 0, width: 4, height: 5, stride: 4) == bytes)
            #expect(try MaskPixels.pack(plane, offset: 2, width: 2, height: 3, stride: 6).count == 6)
            #expect(throws: MaskPixels.Unusable.self) { try MaskPixels.pack(plane, offset: 0, width: 4, height: 6, stride: 4) }
            #expect(throws: MaskPixels.Unusable.self) { try MaskPixels.pack(plane, offset: 1, width: 4, height: 5, stride: 4) }
            #expect(throws: MaskPixels.Unusable.self) { try MaskPixels.pack(plane, offset: -1, width: 1, height: 1, stride: 1) }
            #expect(throws: MaskPixels.Unusable.self) { try MaskPixels.pack(plane, offset: 0, width: 4, height: 2, stride: 3) }
            #expect(throws: MaskPixels.Unusable.self) { try MaskPixels.pack(plane, offset: 0, width: 2, height: 2, stride: Int.max) }
            #expect(throws: MaskPixels.Unusable.self) { try MaskPixels.pack(plane, offset: 0, width: 0, height: 2, stride: 2) }
        }
    }
}
