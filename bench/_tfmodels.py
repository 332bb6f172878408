"""TensorFlow Estimator twins of the benchmark specs (specs/fashion_mnist_*.ron).

Each model_fn builds, with tf.keras layers inside a tf.compat.v1 Estimator model_fn, the
model, loss, optimizer and metrics its spec describes, so that a comparison with the
engine measures the same workload. TF 1 optimizers are used because the engine follows
TensorFlow 1's definitions (MomentumOptimizer's `accum = m * accum + g; var -= lr * accum`,
AdamOptimizer's epsilon 1e-8). Keras' default initializers (glorot_uniform kernels, zero
biases) are the engine's defaults too. TensorFlow is imported inside the functions: the
scripts set thread counts and CPU affinity before it starts its pools.
"""

import _tfcommon as common


def _head(tf, mode, logits, labels, optimizer_fn, regularization=None, top_k=None, label_smoothing=0.0):
    """EstimatorSpec for sparse softmax cross-entropy on `logits`.

    The loss is the batch mean plus `regularization` (a scalar tensor or None) in training
    and evaluation, as the engine's head does. `optimizer_fn(global_step)` returns the
    optimizer. `top_k` adds a `top_{k}_accuracy` metric in evaluation. A `label_smoothing`
    above 0 takes the cross-entropy against smoothed one-hot labels, as the engine's
    `label_smoothing` does.
    """
    predictions = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": predictions})
    if label_smoothing > 0:
        onehot = tf.one_hot(labels, logits.shape[-1])
        loss = tf.compat.v1.losses.softmax_cross_entropy(onehot, logits, label_smoothing=label_smoothing)
    else:
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if regularization is not None:
        loss = loss + regularization
    if mode == tf.estimator.ModeKeys.EVAL:
        metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=predictions)}
        if top_k:
            hit = tf.math.in_top_k(targets=labels, predictions=logits, k=top_k)
            metrics[f"top_{top_k}_accuracy"] = tf.compat.v1.metrics.mean(tf.cast(hit, tf.float32))
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    global_step = tf.compat.v1.train.get_global_step()
    train_op = optimizer_fn(global_step).minimize(loss, global_step=global_step)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def mlp_model_fn():
    """specs/fashion_mnist_mlp.ron: Flatten, Dense 256 relu (he_normal), Dropout 0.2,
    Dense 128 relu (he_normal), Dense 10; momentum SGD (0.9) with a staircase exponential
    decay of the learning rate (0.1, halved every 1000 steps)."""
    import tensorflow as tf

    layers = tf.keras.layers

    def model_fn(features, labels, mode):
        training = mode == tf.estimator.ModeKeys.TRAIN
        x = layers.Flatten()(features)
        x = layers.Dense(256, activation="relu", kernel_initializer="he_normal")(x)
        x = layers.Dropout(0.2)(x, training=training)
        x = layers.Dense(128, activation="relu", kernel_initializer="he_normal")(x)
        logits = layers.Dense(10)(x)

        def optimizer(global_step):
            lr = tf.compat.v1.train.exponential_decay(0.1, global_step, 1000, 0.5, staircase=True)
            return tf.compat.v1.train.MomentumOptimizer(lr, momentum=0.9)

        return _head(tf, mode, logits, labels, optimizer)

    return model_fn


def residual_model_fn():
    """specs/fashion_mnist_residual.ron: stem Conv 16 3x3 SAME relu; block: Conv 16 3x3 SAME
    relu, Conv 16 3x3 SAME linear, added to the stem, relu; MaxPool 2; Flatten; Dense 64
    relu with an L2(1e-4) kernel penalty (added to the loss); Dropout 0.2; Dense 10; Adam
    0.001; accuracy and top-3 accuracy in evaluation."""
    import tensorflow as tf

    layers = tf.keras.layers

    def model_fn(features, labels, mode):
        training = mode == tf.estimator.ModeKeys.TRAIN
        stem = layers.Conv2D(16, 3, padding="same", activation="relu", name="stem")(features)
        x = layers.Conv2D(16, 3, padding="same", activation="relu", name="block_conv1")(stem)
        x = layers.Conv2D(16, 3, padding="same", name="block_conv2")(x)
        x = layers.Activation("relu", name="block_out")(layers.Add(name="block_sum")([stem, x]))
        x = layers.MaxPooling2D(2, name="pool")(x)
        x = layers.Flatten(name="flatten")(x)
        hidden = layers.Dense(64, activation="relu", name="hidden",
                              kernel_regularizer=tf.keras.regularizers.L2(1e-4))
        x = hidden(x)
        x = layers.Dropout(0.2, name="dropout")(x, training=training)
        logits = layers.Dense(10, name="logits")(x)
        # Keras layers called in a model_fn keep their penalties in `layer.losses`
        # (L2(l) is l * sum(w^2)); an Estimator user adds them to the loss.
        regularization = tf.add_n(hidden.losses)

        def optimizer(global_step):
            return tf.compat.v1.train.AdamOptimizer(0.001)

        return _head(tf, mode, logits, labels, optimizer, regularization=regularization, top_k=3)

    return model_fn


def vgg_model_fn():
    """specs/fashion_mnist_vgg.ron: Conv 64 3x3 SAME relu x2, MaxPool 2, Conv 128 3x3 SAME
    relu x2, MaxPool 2, Flatten, Dense 256 relu, Dense 10; momentum SGD (0.01, 0.9)."""
    import tensorflow as tf

    layers = tf.keras.layers

    def model_fn(features, labels, mode):
        x = features
        for filters in (64, 128):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.MaxPooling2D(2)(x)
        x = layers.Flatten()(x)
        x = layers.Dense(256, activation="relu")(x)
        logits = layers.Dense(10)(x)

        def optimizer(global_step):
            return tf.compat.v1.train.MomentumOptimizer(0.01, momentum=0.9)

        return _head(tf, mode, logits, labels, optimizer)

    return model_fn


def resnet_model_fn():
    """specs/fashion_mnist_resnet.ron: Conv 32 3x3 SAME (no bias, he_normal) + batch norm
    + relu; a strided Conv 32 + BN + relu; a residual block of two Conv 32 + BN; a strided
    block of two Conv 64 + BN with a 1x1 strided projection shortcut; global average
    pooling; Dense 10. Adam (TF 1, epsilon 1e-8) on a cosine decay from 0.003 over 4690
    steps. Batch normalization as TF 1 Estimators write it (momentum 0.99, epsilon 1e-3,
    the moving statistics updated through UPDATE_OPS in the train op)."""
    import tensorflow as tf

    bn_layer = tf.compat.v1.layers.batch_normalization

    def model_fn(features, labels, mode):
        training = mode == tf.estimator.ModeKeys.TRAIN

        def conv_bn(x, filters, strides=1, kernel=3):
            x = tf.compat.v1.layers.conv2d(
                x, filters, kernel, strides=strides, padding="same" if kernel > 1 else "valid", use_bias=False,
                kernel_initializer=tf.compat.v1.keras.initializers.he_normal())
            return bn_layer(x, momentum=0.99, epsilon=1e-3, training=training)

        x = tf.nn.relu(conv_bn(features, 32))
        x = tf.nn.relu(conv_bn(x, 32, strides=2))
        y = tf.nn.relu(conv_bn(x, 32))
        x = tf.nn.relu(x + conv_bn(y, 32))
        y = tf.nn.relu(conv_bn(x, 64, strides=2))
        y = conv_bn(y, 64)
        x = tf.nn.relu(conv_bn(x, 64, strides=2, kernel=1) + y)
        x = tf.reduce_mean(x, axis=[1, 2])
        logits = tf.compat.v1.layers.dense(x, 10)

        class WithUpdates:
            def __init__(self, opt):
                self.opt = opt

            def minimize(self, loss, global_step):
                with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
                    return self.opt.minimize(loss, global_step=global_step)

        def optimizer(global_step):
            lr = tf.compat.v1.train.cosine_decay(0.003, global_step, 4690)
            return WithUpdates(tf.compat.v1.train.AdamOptimizer(lr, epsilon=1e-8))

        return _head(tf, mode, logits, labels, optimizer)

    return model_fn


def vit_model_fn():
    """specs/fashion_mnist_vit.ron: a 4x4 strided Conv 64 as the patch embedding, 49 tokens
    with a learned position embedding, two pre-norm encoder blocks (LayerNormalization
    epsilon 1e-6, MultiHeadAttention 4 heads of 16 with dropout 0.1, a Dense 128 GELU and
    Dense 64 MLP with dropout 0.1, residual adds), a final LayerNormalization, the mean over
    tokens, Dense 10; label smoothing 0.1. AdamW as TF 1 graphs can write it: Adam (epsilon
    1e-7) with the decoupled weight decay `var -= lr * 0.05 * var` applied after each update
    (Keras' AdamW rule), on a 300-step linear warmup into a cosine decay from 0.002 over
    4690 steps. The layers are tf.keras' own, called inside the model_fn."""
    import tensorflow as tf

    layers = tf.keras.layers

    def model_fn(features, labels, mode):
        training = mode == tf.estimator.ModeKeys.TRAIN
        x = layers.Conv2D(64, 4, strides=4)(features)
        x = tf.reshape(x, [-1, 49, 64])
        pos = tf.compat.v1.get_variable(
            "pos_embedding", [49, 64], initializer=tf.compat.v1.random_normal_initializer(stddev=0.02))
        x = x + pos
        for _ in range(2):
            y = layers.LayerNormalization(epsilon=1e-6)(x)
            y = layers.MultiHeadAttention(num_heads=4, key_dim=16, dropout=0.1)(y, y, training=training)
            x = x + y
            y = layers.LayerNormalization(epsilon=1e-6)(x)
            y = layers.Dense(128, activation="gelu")(y)
            y = layers.Dense(64)(y)
            y = layers.Dropout(0.1)(y, training=training)
            x = x + y
        x = layers.LayerNormalization(epsilon=1e-6)(x)
        x = tf.reduce_mean(x, axis=1)
        logits = layers.Dense(10)(x)

        class AdamW:
            def __init__(self, lr):
                self.lr = lr
                self.opt = tf.compat.v1.train.AdamOptimizer(lr, epsilon=1e-7)

            def minimize(self, loss, global_step):
                update = self.opt.minimize(loss, global_step=global_step)
                with tf.control_dependencies([update]):
                    decay = [v.assign_sub(self.lr * 0.05 * v) for v in tf.compat.v1.trainable_variables()]
                return tf.group(*decay)

        def optimizer(global_step):
            step = tf.cast(global_step, tf.float32)
            warm = 0.002 * (step + 1.0) / 300.0
            lr = tf.where(step < 300.0, warm, tf.compat.v1.train.cosine_decay(0.002, global_step - 300, 4690))
            return AdamW(lr)

        return _head(tf, mode, logits, labels, optimizer, label_smoothing=0.1)

    return model_fn


# The tutorial CNN's twin stays in _tfcommon.py, shared with tf_mwms_estimator.py.
MODEL_FNS = {
    "cnn": lambda: common.make_model_fn(0.05),
    "mlp": mlp_model_fn,
    "residual": residual_model_fn,
    "vgg": vgg_model_fn,
    "resnet": resnet_model_fn,
    "vit": vit_model_fn,
}


def make_model_fn(model):
    return MODEL_FNS[model]()
