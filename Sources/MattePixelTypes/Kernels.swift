/// What the per-frame pixel kernels offer. The kernels (Sources/PixelKernels) are compiled once per
/// instruction set, each copy a module of its own; MattePixels picks one at run time and calls it
/// through these protocols, so its users see one `Compositor` and one `Resampler` whatever the CPU.

/// Pixel order of the composite output.
public enum CompositeFormat: Sendable {
    case bgra, rgba
}

/// What the composite lies over: nothing (the matte becomes the alpha channel), a colour, or a
/// blurred copy of the frame.
public enum BackgroundMode: String, CaseIterable, Sendable {
    case none, color, blur
}

/// A frame and its alpha → the composite output (see MattePixels.Compositor).
public protocol Compositing {
    init()
    mutating func composite(frame: BGRAImage, alpha: GrayView, output: UnsafeMutablePointer<UInt8>,
                            outputStride: Int, format: CompositeFormat, background: BackgroundMode,
                            color: UInt32, foregroundEstimation: Bool, premultiplied: Bool)
}

/// Resampling between two fixed sizes (see MattePixels.Resampler).
public protocol Resampling: AnyObject {
    init(sourceWidth: Int, sourceHeight: Int, targetWidth: Int, targetHeight: Int)
    func bgraToRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>,
                   pixelStep: Int, rowStride: Int, planeStride: Int, scale: Float)
    func resample(_ source: UnsafePointer<Float>, sourceStride: Int,
                  into destination: UnsafeMutablePointer<Float>, destinationStride: Int)
    func resample(_ source: UnsafePointer<Float>, sourceStride: Int, into destination: GrayImage)
    func resample(_ source: GrayView, into destination: UnsafeMutablePointer<Float>, destinationStride: Int)
}

/// A frame's pixels as a network's full-size float planes and back (see MattePixels.PlaneConverter):
/// no resampling, one pass each way.
public protocol PlaneConverting {
    init()
    /// BGRA bytes → R, G and B float planes (`planeStride` floats apart, rows packed), value/255.
    func bgraToPlanarRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>, planeStride: Int)
    /// A float plane in [0, 1] (rows packed) → 8-bit, rounded half up and clamped.
    func planeToGray(_ source: UnsafePointer<Float>, into destination: GrayImage)
}
