#!/usr/bin/env python3
"""Keras twins of specs/fashion_mnist_resnet.ron and specs/fashion_mnist_vit.ron, trained
with model.fit on the same data, batch, steps and schedule, then evaluated on the test
set. Prints one JSON line: model, steps, test accuracy, training wall time.

    bench/.venv-tf/bin/python bench/keras_twins.py --model resnet [--steps 4690] [--threads 2]

Layer for layer as the specs (Keras names and defaults are the engine's): convolutions
without biases into BatchNormalization (momentum 0.99, epsilon 1e-3); the ViT's patch
convolution, learned position embedding (normal, stddev 0.02), pre-norm blocks with
MultiHeadAttention(4 heads, key_dim 16, dropout 0.1), a GELU MLP, AdamW (weight decay
0.05, epsilon 1e-7) and label smoothing 0.1. The learning rate schedules are written
out as the engine computes them (TensorFlow 1 cosine decay of the global step; a linear
warmup from 0 to the schedule's value at the warmup's end).
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _tfcommon as common  # noqa: E402


def schedules(tf):
    class Cosine(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, initial, decay_steps):
            self.initial, self.decay_steps = initial, decay_steps

        def __call__(self, step):
            s = tf.minimum(tf.cast(step, tf.float32), float(self.decay_steps))
            return self.initial * 0.5 * (1.0 + tf.cos(math.pi * s / self.decay_steps))

    class Warmup(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, steps, then):
            self.steps, self.then = steps, then

        def __call__(self, step):
            s = tf.cast(step, tf.float32)
            warm = self.then(float(self.steps)) * s / self.steps
            return tf.where(s < self.steps, warm, self.then(step))

    return Cosine, Warmup


def resnet(tf, steps):
    layers = tf.keras.layers
    Cosine, _ = schedules(tf)

    def conv(x, filters, strides=1, kernel=3, name=None):
        pad = "same" if kernel > 1 else "valid"
        x = layers.Conv2D(filters, kernel, strides=strides, padding=pad, use_bias=False,
                          kernel_initializer="he_normal", name=name)(x)
        return layers.BatchNormalization(name=f"{name}_bn")(x)

    image = layers.Input((28, 28, 1))
    x = layers.ReLU()(conv(image, 32, name="stem"))
    x = layers.ReLU()(conv(x, 32, strides=2, name="down1"))
    y = layers.ReLU()(conv(x, 32, name="block1_conv1"))
    y = conv(y, 32, name="block1_conv2")
    x = layers.ReLU()(layers.Add()([x, y]))
    y = layers.ReLU()(conv(x, 64, strides=2, name="block2_conv1"))
    y = conv(y, 64, name="block2_conv2")
    shortcut = conv(x, 64, strides=2, kernel=1, name="block2_shortcut")
    x = layers.ReLU()(layers.Add()([shortcut, y]))
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(10)(x)
    model = tf.keras.Model(image, logits)
    optimizer = tf.keras.optimizers.Adam(Cosine(0.003, steps), epsilon=1e-8)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, optimizer, loss, False


def vit(tf, steps):
    layers = tf.keras.layers
    Cosine, Warmup = schedules(tf)

    class AddPositionEmbedding(layers.Layer):
        def build(self, shape):
            init = tf.keras.initializers.RandomNormal(stddev=0.02)
            self.pos = self.add_weight(name="pos_embedding", shape=shape[1:], initializer=init)

        def call(self, x):
            return x + self.pos

    image = layers.Input((28, 28, 1))
    x = layers.Conv2D(64, 4, strides=4)(image)
    x = layers.Reshape((49, 64))(x)
    x = AddPositionEmbedding()(x)
    for _ in range(2):
        y = layers.LayerNormalization(epsilon=1e-6)(x)
        y = layers.MultiHeadAttention(num_heads=4, key_dim=16, dropout=0.1)(y, y)
        x = layers.Add()([x, y])
        y = layers.LayerNormalization(epsilon=1e-6)(x)
        y = layers.Dense(128, activation="gelu")(y)
        y = layers.Dense(64)(y)
        y = layers.Dropout(0.1)(y)
        x = layers.Add()([x, y])
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    x = layers.GlobalAveragePooling1D()(x)
    logits = layers.Dense(10)(x)
    model = tf.keras.Model(image, logits)
    optimizer = tf.keras.optimizers.AdamW(Warmup(300, Cosine(0.002, steps)), weight_decay=0.05, epsilon=1e-7)
    loss = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    return model, optimizer, loss, True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["resnet", "vit"], required=True)
    ap.add_argument("--steps", type=int, default=4690)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    common.apply_threads(args.threads)
    common.quiet_tensorflow()
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(42)
    images, labels = common.load_fashion_mnist("train")
    test_images, test_labels = common.load_fashion_mnist("test")
    x = images.astype("float32") / 255.0
    xt = test_images.astype("float32") / 255.0
    model, optimizer, loss, one_hot = (resnet if args.model == "resnet" else vit)(tf, args.steps)
    y, yt = labels, test_labels
    if one_hot:
        y, yt = np.eye(10, dtype="float32")[labels], np.eye(10, dtype="float32")[test_labels]
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(60000, seed=1, reshuffle_each_iteration=True)
        .batch(args.batch, drop_remainder=True)
        .repeat()
        .prefetch(2)
    )
    start = time.time()
    model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
    train_s = time.time() - start
    _, accuracy = model.evaluate(xt, yt, batch_size=1000, verbose=0)
    print(json.dumps({
        "model": args.model, "framework": f"keras (tensorflow {tf.__version__})", "steps": args.steps,
        "batch": args.batch, "test_accuracy": round(float(accuracy), 4), "train_seconds": round(train_s, 1),
    }))


if __name__ == "__main__":
    try:
        main()
    except common.BenchError as e:
        sys.exit(f"keras_twins: {e}")
