# deploy/: the OCI image (deploy/image/build.sh) and its test. The image's binaries are built with
# STATIC=1 into their own build folder, so `make image` leaves $(BUILD) as it is.
#   make image [IMAGE=localhost/isn:VERSION]     CPU image from build-static (CUDA=0 STATIC=1)
#   make image GPU=1                            GPU variant from build-gpu (CUDA=1 STATIC=1), tag ...-gpu
#   make image-test                             runs the image under podman and queries it with grpcio
IMAGE_VERSION  := $(shell sed -n 's/^\#define ISND_VERSION "\(.*\)"$$/\1/p' daemon/server.h)
IMAGE_PROGRAMS := isnd isn-agg isn-index isn-query
ifeq ($(GPU),1)
IMAGE_BUILD ?= build-gpu
IMAGE       ?= localhost/isn:$(IMAGE_VERSION)-gpu
IMAGE_FLAGS := CUDA=1 STATIC=1 BUILD=$(IMAGE_BUILD)
IMAGE_GPU   := --gpu
else
IMAGE_BUILD ?= build-static
IMAGE       ?= localhost/isn:$(IMAGE_VERSION)
IMAGE_FLAGS := CUDA=0 STATIC=1 BUILD=$(IMAGE_BUILD)
IMAGE_GPU   :=
endif
image:
	bash tools/setup-deps.sh podman
	$(MAKE) --no-print-directory $(IMAGE_FLAGS) $(IMAGE_PROGRAMS:%=$(IMAGE_BUILD)/bin/%)
	bash deploy/image/build.sh $(IMAGE_BUILD) $(IMAGE) $(IMAGE_GPU)
image-test: image $(BUILD)/bin/isn-index
	bash tools/setup-deps.sh runc
	IMAGE=$(IMAGE) BUILD=$(BUILD) bash tests/integration/image_test.sh
.PHONY: image image-test
