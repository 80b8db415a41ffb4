/// The pixel work the engines and the element call, on the kernels of `PixelISA.active` (or of the
/// build a test names).

/// Turns a BGRA frame and its alpha plane into the composite output; reuses its buffers across frames.
/// `output` is a BGRA/RGBA frame of the same size as `frame`. With `foregroundEstimation`, pixels at
/// the matte's soft edge take their estimated foreground colour instead of the frame's, which still
/// holds the old background there: over a colour or the blur no halo of it remains, and the
/// straight-alpha output carries clean colours.
public struct Compositor {
    private var kernel: any Compositing

    public init(isa: PixelISA = .active) {
        kernel = isa.compositor.init()
    }

    public mutating func composite(frame: BGRAImage, alpha: GrayView, output: UnsafeMutablePointer<UInt8>,
                                   outputStride: Int, format: CompositeFormat, background: BackgroundMode,
                                   color: UInt32, foregroundEstimation: Bool = false, premultiplied: Bool = false) {
        kernel.composite(frame: frame, alpha: alpha, output: output, outputStride: outputStride, format: format,
                         background: background, color: color, foregroundEstimation: foregroundEstimation,
                         premultiplied: premultiplied)
    }
}

/// Resamples between two fixed sizes; scratch rows are allocated once and reused per frame.
public final class Resampler {
    public let sourceWidth: Int, sourceHeight: Int
    public let targetWidth: Int, targetHeight: Int
    private let kernel: any Resampling

    public init(sourceWidth: Int, sourceHeight: Int, targetWidth: Int, targetHeight: Int, isa: PixelISA = .active) {
        self.sourceWidth = sourceWidth
        self.sourceHeight = sourceHeight
        self.targetWidth = targetWidth
        self.targetHeight = targetHeight
        kernel = isa.resampler.init(sourceWidth: sourceWidth, sourceHeight: sourceHeight,
                                    targetWidth: targetWidth, targetHeight: targetHeight)
    }

    /// BGRA bytes → three float planes (R, G, B order, each `planeStride` apart, rows `rowStride`
    /// apart, element step `pixelStep`), values scaled by `scale` (1/255 gives [0, 1]).
    /// NCHW: pixelStep 1, planeStride W·H. NHWC: pixelStep 3, planeStride 1.
    public func bgraToRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>,
                          pixelStep: Int, rowStride: Int, planeStride: Int, scale: Float = 1.0 / 255.0) {
        kernel.bgraToRGB(image, into: destination, pixelStep: pixelStep, rowStride: rowStride,
                         planeStride: planeStride, scale: scale)
    }

    /// A float plane (`sourceStride` floats per row) → another float plane.
    public func resample(_ source: UnsafePointer<Float>, sourceStride: Int,
                         into destination: UnsafeMutablePointer<Float>, destinationStride: Int) {
        kernel.resample(source, sourceStride: sourceStride, into: destination, destinationStride: destinationStride)
    }

    /// A float plane of values in [0, 1] → an 8-bit plane (rounded, clamped), within about a level
    /// of the exact interpolation.
    public func resample(_ source: UnsafePointer<Float>, sourceStride: Int, into destination: GrayImage) {
        kernel.resample(source, sourceStride: sourceStride, into: destination)
    }

    /// An 8-bit plane → a float plane in [0, 1].
    public func resample(_ source: GrayView, into destination: UnsafeMutablePointer<Float>, destinationStride: Int) {
        kernel.resample(source, into: destination, destinationStride: destinationStride)
    }
}

/// A frame as full-size float planes (a network's input at the frame's own size) and a float plane
/// back to 8 bits, on the kernels of `PixelISA.active` (or of the build a test names).
public struct PlaneConverter {
    private let kernel: any PlaneConverting

    public init(isa: PixelISA = .active) {
        kernel = isa.planeConverter.init()
    }

    /// BGRA → R, G, B planes `planeStride` floats apart (NCHW for one image: planeStride = W·H), in [0, 1].
    public func bgraToPlanarRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>, planeStride: Int) {
        kernel.bgraToPlanarRGB(image, into: destination, planeStride: planeStride)
    }

    /// A packed float plane of the destination's size, values in [0, 1] → 8-bit (rounded, clamped).
    public func planeToGray(_ source: UnsafePointer<Float>, into destination: GrayImage) {
        kernel.planeToGray(source, into: destination)
    }
}
