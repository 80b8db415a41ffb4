/// Borrowed views of pixels: the element maps a GStreamer buffer (or an engine its own plane) and
/// passes a view; nothing here owns or frees memory. Read views read, write views write: code that
/// only reads a plane takes a `GrayView`, so a caller holding an immutable array lends it as is.

/// A borrowed BGRA frame (rows may be padded: `stride` ≥ 4·width).
public struct BGRAImage {
    public let base: UnsafePointer<UInt8>
    public let width: Int
    public let height: Int
    public let stride: Int
    public init(base: UnsafePointer<UInt8>, width: Int, height: Int, stride: Int) {
        self.base = base
        self.width = width
        self.height = height
        self.stride = stride
    }
}

/// A borrowed 8-bit single-channel plane, written to (an alpha being made).
public struct GrayImage {
    public let base: UnsafeMutablePointer<UInt8>
    public let width: Int
    public let height: Int
    public let stride: Int
    public init(base: UnsafeMutablePointer<UInt8>, width: Int, height: Int, stride: Int) {
        self.base = base
        self.width = width
        self.height = height
        self.stride = stride
    }

    /// The same plane, read-only.
    public var view: GrayView { GrayView(base: UnsafePointer(base), width: width, height: height, stride: stride) }
}

/// A borrowed 8-bit single-channel plane, only read (an alpha being applied, an image being scaled).
public struct GrayView {
    public let base: UnsafePointer<UInt8>
    public let width: Int
    public let height: Int
    public let stride: Int
    public init(base: UnsafePointer<UInt8>, width: Int, height: Int, stride: Int) {
        self.base = base
        self.width = width
        self.height = height
        self.stride = stride
    }

    /// A whole plane of `width`×`height` bytes, rows packed, for the duration of `body`.
    public static func of<Result>(_ plane: [UInt8], width: Int, height: Int, _ body: (GrayView) throws -> Result) rethrows -> Result {
        precondition(plane.count >= width * height)
        return try plane.withUnsafeBufferPointer { try body(GrayView(base: $0.baseAddress!, width: width, height: height, stride: width)) }
    }
}
